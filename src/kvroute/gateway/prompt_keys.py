"""A routed prompt's per-token chained hashes, incrementally per session.

The router asks every backend's cache view about the prompt through the chained hashes
of :mod:`kvroute.trace.hashing` at one token (a view with larger units takes every
``unit``-th of them: :func:`~kvroute.gateway.cache_view.unit_keys`). A session's next
prompt usually extends its previous one (the conversation so far, the answer, a new
user message), so :class:`SessionKeys` keeps each session's last prompt and its hashes,
and when the new prompt extends it only the new tail is hashed, continuing the chain
from its last token (the chain is a prefix function: the result is the hash of the
whole prompt), into room kept after the previous hashes (no copy of them).

On a warm turn a tail is a few hundred tokens, where numpy's per-call cost is most of
the work, so :class:`ChainExtender` makes few calls: a token's content hash depends on
the token alone, so it is looked up in a table of them (built with
:func:`~kvroute.trace.hashing.block_contents` itself), and the chain is hashing's closed
form with the power tables at hand. The tests check every path against
:func:`~kvroute.trace.hashing.chain_hashes`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from kvroute.cache.base import U64

# hashing's internals, imported rather than copied (one definition of the hash); public
# names there would need a rebuild of the compiled cache models, which stamp hashing.py.
from kvroute.trace.hashing import _P, _P_INV, DEFAULT_SEED, _powers, block_contents
from kvroute.types import TokenIds

_MASK = (1 << 64) - 1
_P_INT = int(_P)
_TABLE_MAX_TOKENS = 1 << 20
"""Token ids below this get their content hash from the table (8 MiB at most)."""


@dataclass(frozen=True, slots=True)
class Chain:
    """Chained hashes of a prompt's tokens: ``buffer[:num_keys]``.

    The buffer may have room after them, where the hashes of a longer prompt that
    extends this one are written (never over the first ``num_keys``, which arrays
    handed out before may share).
    """

    buffer: U64
    num_keys: int

    @property
    def keys(self) -> U64:
        return self.buffer[: self.num_keys]


class ChainExtender:
    """Extends per-token chained hashes over a prompt's new tail, with few numpy calls.

    Holds the powers of the chain multiplier (and of its inverse) and the content hash
    of every token id up to the largest seen, as arrays grown on demand.
    """

    def __init__(self) -> None:
        self._powers = _powers(_P, 1024)
        self._inverse_powers = _powers(_P_INV, 1024)
        self._token_contents = block_contents(np.arange(1 << 16, dtype=np.uint64), 1)

    def extend(self, token_ids: TokenIds, known: Chain | None, *, room: bool = False) -> Chain:
        """The chain of ``token_ids``, where ``known`` (when given) is the chain of a
        prefix of them: only the tokens after it are hashed, into its buffer when it has
        room (else a new one, with room for later turns when ``room``)."""
        num_known = 0 if known is None else known.num_keys
        total = int(token_ids.shape[0])
        if known is not None and known.buffer.shape[0] >= total:
            buffer = known.buffer
        else:
            buffer = np.empty(total + (total // 4 + 64 if room else 0), dtype=np.uint64)
            if known is not None:
                buffer[:num_known] = known.keys
        if total > num_known:
            seed = int(buffer[num_known - 1]) if num_known else DEFAULT_SEED
            self._chain(self._contents(token_ids[num_known:]), seed, buffer[num_known:total])
        return Chain(buffer, total)

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
    """A session's last prompt and its chain."""

    token_ids: TokenIds
    chain: Chain


class SessionKeys:
    """Per-token chained hashes of prompts, reusing each session's previous prompt
    (LRU, ``max_sessions``). Event-loop only."""

    def __init__(self, max_sessions: int = 2048) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._extender = ChainExtender()

    def keys(self, token_ids: TokenIds, session_key: str | None) -> U64:
        """``chain_hashes(token_ids, 1)``; remembered as the session's last prompt when
        ``session_key`` is given."""
        if session_key is None:
            return self._extender.extend(token_ids, None).keys
        sessions = self._sessions
        previous = sessions.get(session_key)
        known = (
            previous.chain
            if previous is not None and extends(token_ids, previous.token_ids)
            else None
        )
        chain = self._extender.extend(token_ids, known, room=True)
        sessions[session_key] = _Session(token_ids, chain)
        sessions.move_to_end(session_key)
        if len(sessions) > self.max_sessions:
            sessions.popitem(last=False)
        return chain.keys


def extends(token_ids: TokenIds, previous: TokenIds) -> bool:
    """Whether ``previous`` is a prefix of ``token_ids``."""
    n = previous.shape[0]
    # bytes comparison: a memcmp, several times cheaper than np.array_equal here
    return token_ids.shape[0] >= n and token_ids[:n].tobytes() == previous.tobytes()
