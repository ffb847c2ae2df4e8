"""The glue of a cache_aware route: tokenize the prompt, ask each candidate's cache
view for its predicted hit, pin the request in the chosen backend's view, and say why.

The explanation goes to the ``x-kvroute-route`` response header and a debug log line::

    cache_aware prompt=4123 hit=llama-1:4096,llama-2:0 -> llama-1

The request is pinned in the view of the backend the policy put first. When the proxy
fails over to another backend, the first one's view still records the prompt (an
approximation: failovers are rare, and the view self-corrects as it evicts).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvroute.cache.base import U64, CacheSeq
from kvroute.gateway.backends import Backend
from kvroute.gateway.prompt_tokens import PromptTokens
from kvroute.trace.hashing import chain_hashes, extend_chain_hashes
from kvroute.types import TokenIds

DEFAULT_MAX_OUTPUT_TOKENS = 256
"""Room reserved for the answer when the request sets no ``max_tokens``."""


@dataclass(frozen=True, slots=True)
class Prediction:
    token_ids: TokenIds
    seqs: list[CacheSeq]
    """Per candidate backend: the prompt at that backend's cache unit."""
    hits: list[int]
    """Per candidate backend: predicted cached prompt tokens."""

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    def explain(self, backends: Sequence[Backend], chosen: Backend) -> str:
        hits = ",".join(f"{b.name}:{h}" for b, h in zip(backends, self.hits, strict=True))
        return f"cache_aware prompt={self.num_tokens} hit={hits} -> {chosen.name}"


@dataclass(frozen=True, slots=True)
class _SessionChain:
    """A session's last prompt and its chained hashes per cache unit."""

    token_ids: TokenIds
    keys_by_unit: dict[int, U64]


class CacheRouter:
    """Per-request cache predictions over the backends' views. Event-loop only.

    A session's previous prompt is kept (LRU, ``max_sessions``): when the new prompt
    extends it, only the new blocks are hashed, continuing the chain from the last
    full block (the chain is a prefix function, so the result is the same).
    """

    def __init__(
        self, prompts: PromptTokens, logger: logging.Logger, max_sessions: int = 2048
    ) -> None:
        self.prompts = prompts
        self.logger = logger
        self.max_sessions = max_sessions
        self._next_request_id = 0
        self._sessions: OrderedDict[str, _SessionChain] = OrderedDict()

    def predict(
        self, body: Mapping[str, Any], backends: Sequence[Backend], session_key: str | None = None
    ) -> Prediction | None:
        """Predicted hits on each of ``backends``; None when the prompt cannot be
        tokenized (the policy then balances load)."""
        token_ids = self.prompts.token_ids(body)
        if token_ids is None or token_ids.shape[0] == 0:
            return None
        previous = self._sessions.get(session_key) if session_key is not None else None
        if previous is not None and not _extends(token_ids, previous.token_ids):
            previous = None
        keys_by_unit: dict[int, U64] = {}
        by_unit: dict[tuple[int, bool], CacheSeq] = {}
        seqs: list[CacheSeq] = []
        hits: list[int] = []
        for backend in backends:
            view = backend.view()
            unit = view.model.unit_tokens
            key = (unit, view.model.needs_token_ids)
            seq = by_unit.get(key)
            if seq is None:
                keys = keys_by_unit.get(unit)
                if keys is None:
                    keys = keys_by_unit[unit] = _chain(token_ids, unit, previous)
                seq = by_unit[key] = view.seq(token_ids, keys)
            seqs.append(seq)
            hits.append(view.predict(seq))
        if session_key is not None:
            self._sessions[session_key] = _SessionChain(token_ids, keys_by_unit)
            self._sessions.move_to_end(session_key)
            if len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return Prediction(token_ids, seqs, hits)

    def start(
        self,
        prediction: Prediction,
        backends: Sequence[Backend],
        chosen: Backend,
        body: Mapping[str, Any],
    ) -> Callable[[int], None]:
        """Pin the request in ``chosen``'s view; returns the function to call with the
        number of generated tokens when the request ends."""
        request_id = self._next_request_id
        self._next_request_id += 1
        max_output = body.get("max_tokens") or body.get("max_completion_tokens")
        if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 1:
            max_output = DEFAULT_MAX_OUTPUT_TOKENS
        view = chosen.view()
        seq = prediction.seqs[backends.index(chosen)]
        view.start(request_id, seq, prediction.token_ids, max_output)
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug(prediction.explain(backends, chosen))

        def finish(num_output_tokens: int) -> None:
            view.finish(request_id, num_output_tokens)

        return finish


def _extends(token_ids: TokenIds, previous: TokenIds) -> bool:
    n = previous.shape[0]
    # bytes comparison: a memcmp, several times cheaper than np.array_equal here
    return token_ids.shape[0] >= n and token_ids[:n].tobytes() == previous.tobytes()


def _chain(token_ids: TokenIds, unit: int, previous: _SessionChain | None) -> U64:
    """Chained hashes of the full units of ``token_ids``, continuing ``previous``'s
    chain where the prompt extends it."""
    known = previous.keys_by_unit.get(unit) if previous is not None else None
    if known is None:
        return chain_hashes(token_ids, unit)
    return extend_chain_hashes(known, token_ids, unit)
