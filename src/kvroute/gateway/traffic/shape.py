"""Live traffic shape: a rolling window over the requests the gateway answered.

Per window (the last ``window_requests`` requests, none older than ``window_s``):

- **prefix overlap**: the share of prompt tokens whose block was already in some
  earlier prompt of the window (chained block hashes, so a block matches only when
  its whole prefix does). It needs prompt tokens: today those of cache_aware routes,
  which tokenize every prompt anyway; without such a route only shares are reported.
- **share by workload class**, and **hit rate per backend** (engine-reported cached
  tokens ÷ prompt tokens from the upstream usage).
- **predicted vs reported cache hit** per backend on cache_aware routes: the cache
  view's prediction for the chosen backend beside what the engine reported.

The overlap is placed in the verdict bands of :mod:`kvroute.analyze.verdict`
(below 40 %, 40-60 %, above 60 %). A band counts as settled once the overlap has
stayed in it for ``band_hold_s``; settling below 40 % or above 60 % logs one warning
(once per crossing) and moves the ``kvroute:traffic_overlap_band`` gauge.

Window index (:mod:`kvroute.gateway.traffic.window_index`): the runs of blocks the requests
held, each with the newest request that went through it; a block is in the window
when that request is. A prompt walks and stamps one run per branch point, so a long
shared system prompt costs about what a short prompt does. Runs no request in the
window went through are swept when the index holds over twice the runs that requests
in the window can have made, or twice the blocks in the window.
Event-loop only (single-threaded).

Compiled with the gateway's native group (:mod:`kvroute._accel`): the window
takes every answered request on the event loop, a few µs each in Python.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from kvroute.analyze.result import EQUIVALENT_BELOW, RADIX_ABOVE, VerdictLevel
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.gateway.traffic.history import TrafficHistory
from kvroute.gateway.traffic.window_index import Hashes, WindowIndex

BAND_WORDS = {
    VerdictLevel.EQUIVALENT: (
        f"below {EQUIVALENT_BELOW:.0%}: engines equivalent on caching; vLLM (or llama.cpp "
        "for few users) is the sensible default"
    ),
    VerdictLevel.GREY_ZONE: (
        f"between {EQUIVALENT_BELOW:.0%} and {RADIX_ABOVE:.0%}: grey zone; run `kvroute simulate` "
        "and `kvroute bench` on a capture before choosing"
    ),
    VerdictLevel.RADIX_PAYS: (
        f"above {RADIX_ABOVE:.0%}: radix caching pays off; SGLang's radix cache (or prefix-aware "
        "routing) should save real prefill"
    ),
}


def band_of(overlap: float) -> VerdictLevel:
    """The verdict band of an overlap rate (same edges as analyze's verdict)."""
    if overlap < EQUIVALENT_BELOW:
        return VerdictLevel.EQUIVALENT
    if overlap <= RADIX_ABOVE:
        return VerdictLevel.GREY_ZONE
    return VerdictLevel.RADIX_PAYS


class Observation:
    """One answered request, as the traffic window keeps it. A plain class with its own
    ``__init__``: the window builds one per request, and a frozen dataclass's generated
    ``__init__`` runs as Python even in the compiled build."""

    __slots__ = (
        "backend",
        "matched_tokens",
        "num_tokens",
        "predicted_cached_tokens",
        "reported_cached_tokens",
        "seq",
        "t_s",
        "usage_prompt_tokens",
        "workload",
    )

    def __init__(
        self,
        seq: int,
        t_s: float,
        workload: str,
        backend: str,
        num_tokens: int,
        matched_tokens: int,
        usage_prompt_tokens: int,
        reported_cached_tokens: int | None,
        predicted_cached_tokens: int | None,
    ) -> None:
        self.seq = seq
        self.t_s = t_s
        self.workload = workload
        self.backend = backend
        self.num_tokens = num_tokens
        """Tokenized prompt length (0: not tokenized)."""
        self.matched_tokens = matched_tokens
        self.usage_prompt_tokens = usage_prompt_tokens
        self.reported_cached_tokens = reported_cached_tokens
        self.predicted_cached_tokens = predicted_cached_tokens
        """The cache view's prediction for this backend (cache_aware routes)."""


@dataclass(slots=True)
class BackendTotals:
    """Window sums for one backend."""

    num_requests: int = 0
    prompt_tokens: int = 0
    """Usage prompt tokens of requests whose engine reported cached tokens."""
    cached_tokens: int = 0
    num_predicted: int = 0
    """Requests with both a prediction and an engine report."""
    predicted_tokens: int = 0
    reported_tokens: int = 0
    abs_error_tokens: int = 0
    predicted_prompt_tokens: int = 0

    def add(self, o: Observation, sign: int) -> None:
        self.num_requests += sign
        if o.reported_cached_tokens is not None and o.usage_prompt_tokens:
            self.prompt_tokens += sign * o.usage_prompt_tokens
            self.cached_tokens += sign * o.reported_cached_tokens
        if o.predicted_cached_tokens is not None and o.reported_cached_tokens is not None:
            self.num_predicted += sign
            self.predicted_tokens += sign * o.predicted_cached_tokens
            self.reported_tokens += sign * o.reported_cached_tokens
            self.abs_error_tokens += sign * abs(
                o.predicted_cached_tokens - o.reported_cached_tokens
            )
            self.predicted_prompt_tokens += sign * (o.usage_prompt_tokens or o.num_tokens)

    @property
    def hit_ratio(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def mean_abs_error_tokens(self) -> float | None:
        return self.abs_error_tokens / self.num_predicted if self.num_predicted else None

    @property
    def abs_error_ratio(self) -> float | None:
        """Σ |predicted - reported| ÷ Σ prompt tokens over predicted requests."""
        if not self.num_predicted or not self.predicted_prompt_tokens:
            return None
        return self.abs_error_tokens / self.predicted_prompt_tokens


@dataclass(frozen=True, slots=True)
class BandChange:
    """A settled crossing into ``band`` (what the warning said)."""

    band: VerdictLevel
    overlap: float
    at_s: float
    message: str


class TrafficShape:
    """The rolling window, its sums, the band state and the drift counters."""

    def __init__(self, config: TrafficConfig, logger: logging.Logger | None = None) -> None:
        self.config = config
        self.logger = logger or logging.getLogger("kvroute.gateway.traffic")
        self._window: deque[Observation] = deque()
        self._seq = 0
        self._index = WindowIndex()
        self._num_blocks_in_window = 0
        self._blocks: deque[int] = deque()  # blocks per observation, same order
        self.num_tokens = 0
        self.matched_tokens = 0
        self.num_tokenized = 0
        self.classes: dict[str, int] = {}
        self.backends: dict[str, BackendTotals] = {}
        # Counters since start (never leave with the window).
        self.predicted_total: dict[str, int] = {}
        self.reported_total: dict[str, int] = {}
        self.band: VerdictLevel | None = None
        self._candidate: VerdictLevel | None = None
        self._candidate_since_s = 0.0
        self.changes: deque[BandChange] = deque(maxlen=10)
        self.history = TrafficHistory()
        """Per-minute totals for the status page (the window only knows now)."""
        """The latest settled crossings."""
        self.num_changes: dict[VerdictLevel, int] = {}

    # -- feeding ------------------------------------------------------------------------

    def observe(
        self,
        now_s: float,
        *,
        workload: str,
        backend: str,
        block_hashes: Hashes = (),
        num_tokens: int = 0,
        usage_prompt_tokens: int | None = None,
        reported_cached_tokens: int | None = None,
        predicted_cached_tokens: int | None = None,
    ) -> Observation:
        """Add one answered request. ``block_hashes`` are its prompt's chained block
        hashes at ``block_size_tokens`` (empty when the prompt was not tokenized);
        ``now_s`` is a monotonic time. Returns what the window keeps."""
        self._expire(now_s)
        seq = self._seq
        self._seq += 1
        matched = 0
        if num_tokens:
            floor = self._window[0].seq if self._window else seq
            num_blocks = self._index.observe(block_hashes, seq, floor)
            matched = min(num_blocks * self.config.block_size_tokens, num_tokens)
        obs = Observation(
            seq,
            now_s,
            workload or "unknown",
            backend,
            num_tokens,
            matched,
            usage_prompt_tokens or 0,
            reported_cached_tokens,
            predicted_cached_tokens,
        )
        self._push(obs, len(block_hashes) if num_tokens else 0)
        self.history.add(
            now_s,
            backend=backend,
            num_tokens=num_tokens,
            matched_tokens=matched,
            usage_prompt_tokens=usage_prompt_tokens or 0,
            reported_cached_tokens=reported_cached_tokens,
        )
        if predicted_cached_tokens is not None and reported_cached_tokens is not None:
            self.predicted_total[backend] = (
                self.predicted_total.get(backend, 0) + predicted_cached_tokens
            )
            self.reported_total[backend] = (
                self.reported_total.get(backend, 0) + reported_cached_tokens
            )
        self._update_band(now_s)
        return obs

    def observe_records(self, records: list[dict[str, Any]], now_s: float) -> None:
        """Requests that capture tokenized and hashed (capture's records, at this
        window's block size): their full prompt blocks, class, backend, engine usage."""
        block = self.config.block_size_tokens
        for rec in records:
            num_tokens = int(rec.get("input_len", 0))
            hashes: list[int] = rec.get("hashes") or []
            self.observe(
                now_s,
                workload=rec.get("class") or "",
                backend=rec.get("backend") or "",
                block_hashes=hashes[: num_tokens // block],
                num_tokens=num_tokens,
                usage_prompt_tokens=rec.get("usage_prompt_tokens"),
                reported_cached_tokens=rec.get("cached"),
            )

    def _push(self, obs: Observation, num_blocks: int) -> None:
        self._window.append(obs)
        self._blocks.append(num_blocks)
        self._num_blocks_in_window += num_blocks
        self._account(obs, 1)
        while len(self._window) > self.config.window_requests:
            self._pop()
        index = self._index
        if (
            index.num_runs > 4 * len(self._window) + 1024
            or index.num_blocks > 2 * self._num_blocks_in_window + 1024
        ):  # at most half of it live: a sweep's cost is paid by what it drops
            index.sweep(self._window[0].seq if self._window else self._seq)

    def _pop(self) -> None:
        obs = self._window.popleft()
        self._num_blocks_in_window -= self._blocks.popleft()
        self._account(obs, -1)

    def _expire(self, now_s: float) -> None:
        oldest = now_s - self.config.window_s
        while self._window and self._window[0].t_s < oldest:
            self._pop()

    def _account(self, o: Observation, sign: int) -> None:
        if o.num_tokens:
            self.num_tokenized += sign
            self.num_tokens += sign * o.num_tokens
            self.matched_tokens += sign * o.matched_tokens
        self.classes[o.workload] = self.classes.get(o.workload, 0) + sign
        if not self.classes[o.workload]:
            del self.classes[o.workload]
        if o.backend:
            totals = self.backends.get(o.backend)
            if totals is None:
                totals = self.backends[o.backend] = BackendTotals()
            totals.add(o, sign)
            if not totals.num_requests:
                del self.backends[o.backend]

    # -- reading ------------------------------------------------------------------------

    @property
    def num_requests(self) -> int:
        return len(self._window)

    @property
    def overlap(self) -> float | None:
        """Prefix overlap of the window; None when no prompt in it was tokenized."""
        return self.matched_tokens / self.num_tokens if self.num_tokens else None

    def class_shares(self) -> dict[str, float]:
        n = len(self._window)
        return {k: v / n for k, v in sorted(self.classes.items())} if n else {}

    def refresh(self, now_s: float) -> None:
        """Drop requests older than the window and re-check the band (a quiet gateway
        has no requests to do it)."""
        self._expire(now_s)
        self._update_band(now_s)

    def _update_band(self, now_s: float) -> None:
        overlap = self.overlap
        if overlap is None or self.num_tokenized < self.config.min_requests:
            self._candidate = None
            return
        band = band_of(overlap)
        if band is self.band:
            self._candidate = None
            return
        if band is not self._candidate:
            self._candidate, self._candidate_since_s = band, now_s
        if now_s - self._candidate_since_s < self.config.band_hold_s:
            return
        self.band, self._candidate = band, None
        message = (
            f"live prefix overlap has stayed {BAND_WORDS[band]} for "
            f"{self.config.band_hold_s:g} s: {overlap:.1%} over the last "
            f"{self.num_tokenized} tokenized requests"
        )
        self.changes.append(BandChange(band, overlap, now_s, message))
        self.num_changes[band] = self.num_changes.get(band, 0) + 1
        if band is VerdictLevel.GREY_ZONE:
            self.logger.info(message)
        else:
            self.logger.warning(message)
