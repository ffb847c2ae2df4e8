"""The prefix-cache interface every engine model implements, and its vocabulary.

A model holds a KV pool of ``capacity`` tokens split into *units* (a vLLM block, an
SGLang page, one llama.cpp token, or one block of a hash-only trace). A prompt reaches
it as a :class:`CacheSeq`: the chained hashes of its units, so equal keys mean equal
prefixes (:mod:`kvroute.trace.hashing`). Every unit of the pool is in exactly one state::

    free      holds nothing
    cached    holds a prefix some request computed; evictable
    pinned    held by a running request (its prefix hit, its new tokens, its output)

    free + cached + pinned == capacity            (checked by check_invariants)

A request's life is ``pin`` (it starts: the model matches, locks the hit, makes room and
stores what the engine stores at start) then ``unpin`` (it finishes: the model stores what
the engine keeps and releases the lock). ``match`` and ``usage`` never mutate. Models
copy what they keep: a caller may reuse or free the arrays it passed in.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kvroute.types import TokenIds

U64 = npt.NDArray[np.uint64]


class CacheSeq:
    """A token sequence as the cache models see it. Read-only by convention. A plain class
    with its own ``__init__``, not a dataclass: the replay builds two per request, and the
    compiled build (``kvroute._accel``) would run a dataclass's generated
    ``__init__`` interpreted (bench/simulate_bench.py).

    ``keys[i]`` is the chained hash of units ``0..i`` (``unit_tokens`` tokens each), so a
    shared prefix of keys is a shared prefix of tokens. ``num_units`` is the memory the
    sequence takes, in units; the first ``len(keys)`` units are keyed and the rest (a
    partial last block of a token prompt, outputs that must not be cached) take memory
    but can never match. For hash-only traces a partial last block is keyed and counted
    as a whole unit, so ``num_tokens`` may be below ``num_units * unit_tokens``.
    ``token_ids`` are the raw tokens when known (llama.cpp's ``--cache-reuse`` needs them).

    ======================  ===============================================
    units  [0, len(keys))    keyed: cacheable, matchable
    units  [len(keys), n)    unkeyed: memory only (n = num_units)
    tokens [0, num_tokens)   the sequence; tokens_in(m) = min(m * unit, num_tokens)
    ======================  ===============================================
    """

    __slots__ = ("_key_list", "keys", "num_tokens", "num_units", "token_ids", "unit_tokens")

    def __init__(
        self,
        keys: U64,
        num_tokens: int,
        num_units: int,
        unit_tokens: int,
        token_ids: TokenIds | None = None,
    ) -> None:
        n = len(keys)
        if not (n <= num_units and num_tokens <= num_units * unit_tokens):
            raise ValueError(
                f"{n} keys / {num_tokens} tokens do not fit {num_units} units "
                f"of {unit_tokens} tokens"
            )
        self.keys = keys
        self.num_tokens = num_tokens
        self.num_units = num_units
        self.unit_tokens = unit_tokens
        self.token_ids = token_ids
        self._key_list: list[object] | None = None

    def __repr__(self) -> str:
        return (
            f"CacheSeq({len(self.keys)} keys, num_tokens={self.num_tokens}, "
            f"num_units={self.num_units}, unit_tokens={self.unit_tokens})"
        )

    @property
    def num_keys(self) -> int:
        return len(self.keys)

    def key_list(self) -> list[object]:
        """``keys`` as a list of Python ints, converted once per sequence: the models read
        keys one at a time, and a gateway asks several backends' models about the same
        sequence before it pins it in one."""
        keys = self._key_list
        if keys is None:
            keys = self._key_list = self.keys.tolist()
        return keys

    def tokens_in(self, num_units: int) -> int:
        """Tokens covered by the first ``num_units`` units."""
        return min(num_units * self.unit_tokens, self.num_tokens)

    def units_for_total(self, total_tokens: int) -> int:
        """Units this sequence takes once grown to ``total_tokens`` (``>= num_tokens``).

        A keyed partial last unit (hash-only traces) stays a whole unit and growth starts
        on a new one; otherwise growth fills the partial last unit first.
        """
        u = self.unit_tokens
        extra = total_tokens - self.num_tokens
        if len(self.keys) * u > self.num_tokens:
            return self.num_units + -(-extra // u)
        return max(self.num_units, -(-total_tokens // u))


def keys_common_prefix(a: list[object], pos: int, end: int, b: list[object]) -> int:
    """Length of the common prefix of ``a[pos:end]`` and ``b``, keys as Python lists
    (:meth:`CacheSeq.key_list`), by the binary search of :func:`common_prefix_len`,
    without slicing ``a``."""
    n = min(end - pos, len(b))
    if n <= 0 or a[pos] != b[0]:
        return 0
    if a[pos + n - 1] == b[n - 1]:
        return n
    lo, hi = 1, n - 1  # a[pos:pos+lo] == b[:lo]; a[pos+hi] != b[hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if a[pos + mid] == b[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def common_prefix_len(a: U64, b: U64) -> int:
    """Length of the common prefix of two chained-key arrays, in O(log n) probes.

    Chained keys agree up to the first difference and never after it (barring a 64-bit
    collision), so a binary search on equality finds the end of the shared prefix.
    """
    n: int = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    if a[n - 1] == b[n - 1]:
        return n
    lo, hi = 1, n - 1  # a[:lo] == b[:lo]; a[hi] != b[hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] == b[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


class AdmitStatus(enum.Enum):
    """What :meth:`PrefixCache.pin` did with a request."""

    ADMITTED = "admitted"
    NO_ROOM = "no_room"
    """Not now (memory or running slots are taken); the cache is unchanged. Retry later."""
    TOO_LARGE = "too_large"
    """Never: it would not fit even in an empty cache. The cache is unchanged."""


@dataclass(frozen=True, slots=True)
class Admission:
    status: AdmitStatus
    cached_tokens: int = 0
    """Prompt tokens served from the cache (what the engine reports as cached)."""


NO_ROOM = Admission(AdmitStatus.NO_ROOM)
TOO_LARGE = Admission(AdmitStatus.TOO_LARGE)


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """Where the KV pool's tokens are right now. ``capacity_tokens`` and ``free_tokens``
    are ``None`` for an unbounded cache."""

    capacity_tokens: int | None
    free_tokens: int | None
    cached_tokens: int
    """Held by no running request: evictable."""
    pinned_tokens: int
    num_running: int
    host_cached_tokens: int = 0
    """Outside the pool, in host memory (llama.cpp ``--cache-ram``); 0 elsewhere."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters since the model was built. ``evicted_tokens`` counts cached tokens dropped
    from the pool to make room (or by :meth:`PrefixCache.evict`) and ``num_evictions`` the
    times that happened; ``extra`` holds engine-specific counters, documented by each model."""

    evicted_tokens: int
    num_evictions: int
    peak_pinned_tokens: int
    """Most pool tokens pinned at once (after any ``pin``)."""
    extra: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CacheGeometry:
    """What a model is built for: the pool and, for hash-only traces, the fixed unit.

    ``capacity_tokens`` is the KV pool in tokens (``None``: unbounded). ``block_size_tokens``
    is the block size of a hash-only trace, which then fixes every model's unit (``None``
    for token traces: each model uses its own). ``kv_bytes_per_token`` converts byte
    limits (llama.cpp ``--cache-ram``) to tokens when known.
    """

    capacity_tokens: int | None
    block_size_tokens: int | None = None
    kv_bytes_per_token: int | None = None


class PrefixCache(Protocol):
    """One engine's prefix cache. Implementations: :mod:`kvroute.cache.models`."""

    @property
    def name(self) -> str:
        """The registry name (``vllm``, ``sglang``, ``llamacpp``)."""
        ...

    @property
    def unit_tokens(self) -> int:
        """Tokens per unit: the caller builds :class:`CacheSeq` keys at this size."""
        ...

    @property
    def capacity_tokens(self) -> int | None:
        """Usable pool after the engine's rounding (``None``: unbounded)."""
        ...

    @property
    def needs_token_ids(self) -> bool:
        """Whether sequences must carry raw ``token_ids`` (llama.cpp ``--cache-reuse``)."""
        ...

    def match(self, seq: CacheSeq) -> int:
        """Prompt tokens a request with ``seq`` would get from the cache if it started now,
        with the engine's caps (at most ``num_tokens - 1``). Does not mutate."""
        ...

    def pin(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        """Start request ``request_id`` with prompt ``seq``; it will grow to ``final_tokens``.

        Mutates when admitted: the hit is locked, memory for the whole final sequence is
        taken (evicting unpinned data as the engine would), and what the engine stores at
        start is stored. Returns NO_ROOM or TOO_LARGE, leaving the cache unchanged, when it
        cannot start. ``request_id`` must not be running.
        """
        ...

    def unpin(self, request_id: int, final: CacheSeq) -> None:
        """Finish a running request whose sequence is now ``final`` (its prompt followed by
        its output, ``final_tokens`` long). Mutates: stores what the engine keeps, frees
        the rest, and makes its data evictable. Raises ``KeyError`` if it is not running."""
        ...

    def insert(self, seq: CacheSeq) -> int:
        """Store ``seq`` as a request that just ran and finished would leave it (a pin then
        an unpin with ``seq`` as its own final sequence); for a router's picture of a
        backend. Mutates, may evict unpinned data; returns the cached tokens it got, and 0
        without storing anything when it cannot start now."""
        ...

    def evict(self, num_tokens: int) -> int:
        """Evict at least ``num_tokens`` of unpinned cached data in the engine's order, or all
        of it when there is less. Mutates; returns the tokens evicted. Never touches
        pinned data."""
        ...

    def schedule_order(
        self, waiting: Sequence[CacheSeq], *, num_released: int = 0
    ) -> Sequence[int]:
        """The order (indices into ``waiting``, oldest first) in which the engine would try
        to start waiting requests, right after a step that released ``num_released``
        finished requests; FCFS engines return ``range(len(waiting))`` without reading it.
        Does not mutate."""
        ...

    def release_order(self, request_ids: Sequence[int]) -> Sequence[int]:
        """The order in which the engine releases running requests that finish in the same
        step (given in request id order); the replay unpins them in it. Does not mutate."""
        ...

    def usage(self) -> CacheUsage:
        """Where the pool's tokens are. O(1); does not mutate."""
        ...

    def stats(self) -> CacheStats:
        """Counters since the model was built. Does not mutate."""
        ...

    def check_invariants(self) -> None:
        """Raise :class:`~kvroute.cache.models.shared.InvariantViolation` if the state is
        inconsistent (free + cached + pinned != capacity, pinned data unaccounted, ...).
        Each model checks its own state, in its own module. Slow: for tests."""
        ...


def units_for(num_tokens: int, unit_tokens: int) -> int:
    """Units needed to hold ``num_tokens`` (ceiling division)."""
    return -(-num_tokens // unit_tokens)
