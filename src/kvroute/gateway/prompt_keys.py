"""A routed prompt's chained hashes at each backend's cache unit, incrementally per session.

The router asks every backend's cache view about the prompt as that view's model keys
it: the chained hashes of :mod:`kvroute.trace.hashing` at the model's unit (1 token for
the llama.cpp slot model and SGLang's radix tree, 16 for vLLM's blocks). A session's
next prompt usually extends its previous one (the conversation so far, the answer, a
new user message), so :class:`SessionKeys` keeps each session's last prompt and its
hashes, and when the new prompt extends it only the new tail is hashed, continuing
each chain from its last full unit (the chain is a prefix function: the result is the
hash of the whole prompt), into room kept after the previous hashes (no copy of them).

On a warm turn a tail is a few hundred tokens, where numpy's per-call cost is most of
the work, so :class:`ChainExtender` makes few calls: a token's content hash at unit 1
depends on the token alone, so it is looked up in a table of them (built with
:func:`~kvroute.trace.hashing.block_contents` itself); a few larger blocks (a turn's
vLLM blocks) get their position-weighted sums in one call and the finaliser and chain
step in Python (the definitions in :mod:`kvroute.trace.hashing`, on its constants); a
long tail uses hashing's closed form with the power tables at hand. The tests check
every path against :func:`~kvroute.trace.hashing.chain_hashes`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from kvroute.cache.base import U64

# hashing's internals, imported rather than copied (one definition of the hash); public
# names there would need a rebuild of the compiled cache models, which stamp hashing.py.
from kvroute.trace.hashing import (
    _M1,
    _M2,
    _P,
    _P_INV,
    DEFAULT_SEED,
    _powers,
    _weights,
    block_contents,
)
from kvroute.types import TokenIds

_MOD = 1 << 64
_MASK = _MOD - 1
_P_INT = int(_P)
_M1_INT = int(_M1)
_M2_INT = int(_M2)
_PYTHON_CHAIN_MAX = 48
"""At most this many new blocks are finalised and chained in Python (cheaper than the
dozen numpy calls of ``block_contents`` and the chain)."""
_TABLE_MAX_TOKENS = 1 << 20
"""Token ids below this get their unit-1 content hash from the table (8 MiB at most)."""


@dataclass(frozen=True, slots=True)
class Chain:
    """Chained hashes of a prompt's full units at one unit size: ``buffer[:num_keys]``.

    The buffer may have room after them, where the hashes of a longer prompt that
    extends this one are written (never over the first ``num_keys``, which arrays
    handed out before may share).
    """

    buffer: U64
    num_keys: int

    @property
    def keys(self) -> U64:
        return self.buffer[: self.num_keys]


def _python_chain(sums: list[int], length_term: int, seed: int) -> list[int]:
    """The chain over blocks given their position-weighted sums: hashing's
    ``block_contents`` (sum plus length term, then ``_mix``: splitmix64's finaliser,
    shifts 30, 27, 31) and chain step, one Python int at a time."""
    hashes: list[int] = []
    h = seed
    for total in sums:
        x = (total + length_term) & _MASK
        x ^= x >> 30
        x = (x * _M1_INT) & _MASK
        x ^= x >> 27
        x = (x * _M2_INT) & _MASK
        x ^= x >> 31
        h = (h * _P_INT + x) & _MASK
        hashes.append(h)
    return hashes


class ChainExtender:
    """Extends chained hashes over a prompt's new tail, with few numpy calls.

    Holds the powers of the chain multiplier (and of its inverse) and the unit-1
    content hash of every token id up to the largest seen, as arrays grown on demand.
    """

    def __init__(self) -> None:
        self._powers = _powers(_P, 1024)
        self._inverse_powers = _powers(_P_INV, 1024)
        self._token_contents = block_contents(np.arange(1 << 16, dtype=np.uint64), 1)

    def extend(
        self,
        token_ids: TokenIds,
        known: Mapping[int, Chain],
        units: Iterable[int],
        *,
        room: bool = False,
    ) -> dict[int, Chain]:
        """The chains of ``token_ids`` at each of ``units``, where ``known[unit]``
        (when present) is the chain of a prefix of ``token_ids``: only the units after
        it are hashed, into its buffer when it has room (else a new one, with room for
        later turns when ``room``)."""
        out: dict[int, Chain] = {}
        for unit in units:
            prefix = known.get(unit)
            num_known = 0 if prefix is None else prefix.num_keys
            tail = token_ids[num_known * unit :]
            num_new = tail.shape[0] // unit
            total = num_known + num_new
            if prefix is not None and prefix.buffer.shape[0] >= total:
                buffer = prefix.buffer
            else:
                buffer = np.empty(total + (total // 4 + 64 if room else 0), dtype=np.uint64)
                if prefix is not None:
                    buffer[:num_known] = prefix.keys
            out[unit] = Chain(buffer, total)
            if not num_new:
                continue
            seed = int(buffer[num_known - 1]) if num_known else DEFAULT_SEED
            if unit == 1:
                contents = self._contents(tail)
            elif num_new <= _PYTHON_CHAIN_MAX:
                # A few blocks: their weighted sums in one call, the rest in Python.
                blocks = tail[: num_new * unit].reshape(num_new, unit)
                sums = np.dot(blocks, _weights(unit)).tolist()
                buffer[num_known:total] = _python_chain(sums, unit * _M2_INT, seed)
                continue
            else:
                contents = block_contents(tail, unit)
            self._chain(contents, seed, buffer[num_known:total])
        return out

    def _contents(self, tokens: TokenIds) -> U64:
        """``block_contents(tokens, 1)``, from the table of each token's."""
        try:
            return self._token_contents[tokens]  # an id past the table raises
        except IndexError:
            top = int(tokens.max())
        if top >= _TABLE_MAX_TOKENS:
            return block_contents(tokens, 1)
        size = 1 << top.bit_length()
        table = self._token_contents = block_contents(np.arange(size, dtype=np.uint64), 1)
        return table[tokens]

    def _chain(self, contents: U64, seed: int, out: U64) -> None:
        """The chain over ``contents`` from a parent hash ``seed``, into ``out``:
        hashing's single-prompt ``chain_contents``, with the power tables at hand."""
        n = contents.shape[0]
        if not n:
            return
        if n > self._powers.shape[0]:
            size = 1 << (n - 1).bit_length()
            self._powers, self._inverse_powers = _powers(_P, size), _powers(_P_INV, size)
        # h[g] = P**g * (P * seed + sum_{j<=g} contents[j] * P**-j), all modulo 2**64;
        # P * seed joins the first term, so the running sum carries it to every g.
        np.multiply(contents, self._inverse_powers[:n], out=out)
        out[0] = (int(out[0]) + seed * _P_INT) & _MASK
        np.add.accumulate(out, out=out)
        out *= self._powers[:n]


@dataclass(frozen=True, slots=True)
class _Session:
    """A session's last prompt and its chains per cache unit."""

    token_ids: TokenIds
    chains: dict[int, Chain]


class SessionKeys:
    """Chained hashes of prompts per cache unit, reusing each session's previous
    prompt (LRU, ``max_sessions``). Event-loop only."""

    def __init__(self, max_sessions: int = 2048) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._extender = ChainExtender()

    def keys(
        self, token_ids: TokenIds, units: Iterable[int], session_key: str | None
    ) -> dict[int, U64]:
        """``{unit: chain_hashes(token_ids, unit)}`` for each unit; remembered as the
        session's last prompt when ``session_key`` is given."""
        if session_key is None:
            chains = self._extender.extend(token_ids, {}, units)
            return {unit: chain.keys for unit, chain in chains.items()}
        sessions = self._sessions
        previous = sessions.get(session_key)
        known = (
            previous.chains
            if previous is not None and extends(token_ids, previous.token_ids)
            else {}
        )
        chains = self._extender.extend(token_ids, known, units, room=True)
        sessions[session_key] = _Session(token_ids, chains)
        sessions.move_to_end(session_key)
        if len(sessions) > self.max_sessions:
            sessions.popitem(last=False)
        return {unit: chain.keys for unit, chain in chains.items()}


def extends(token_ids: TokenIds, previous: TokenIds) -> bool:
    """Whether ``previous`` is a prefix of ``token_ids``."""
    n = previous.shape[0]
    # bytes comparison: a memcmp, several times cheaper than np.array_equal here
    return token_ids.shape[0] >= n and token_ids[:n].tobytes() == previous.tobytes()
