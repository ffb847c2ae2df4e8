"""A routed prompt's per-token chained hashes, incrementally per session.

The router asks the cache views at one token (llama.cpp slots, SGLang's radix tree)
about the prompt through ``chain_hashes(ids, 1)`` of :mod:`kvroute.trace.hashing`.
A session's next prompt usually extends its previous one (the conversation so far, the
answer, a new user message), so :class:`SessionKeys` keeps each session's last prompt
and its hashes, and when the new prompt extends it only the new tail is hashed,
continuing the chain from its last token (:class:`~kvroute.trace.hashing.ChainExtender`;
the chain is a prefix function: the result is the hash of the whole prompt).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from kvroute.cache.base import U64
from kvroute.trace.hashing import Chain, ChainExtender
from kvroute.types import TokenIds


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
