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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvroute.cache.base import U64, CacheSeq
from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.cacheview.keys import SessionKeys
from kvroute.gateway.cacheview.view import BackendCacheView, Displacement
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.types import TokenIds

DEFAULT_MAX_OUTPUT_TOKENS = 256
"""Room reserved for the answer when the request sets no ``max_tokens``."""


class CachePrediction(NamedTuple):
    """The cached prompt tokens the router predicts for one request on each candidate
    backend (a named tuple: one is built per request)."""

    token_ids: TokenIds
    token_keys: U64
    """The prompt's per-token chained hashes (the keys of views at one token)."""
    seqs: list[CacheSeq]
    """Per candidate backend: the prompt at that backend's cache unit."""
    hits: list[int]
    """Per candidate backend: predicted cached prompt tokens."""
    displaced: list[Displacement]
    """Per candidate backend: the cached tokens of others the request would overwrite."""

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    def explain(self, backends: Sequence[Backend], chosen: Backend) -> str:
        hits = ",".join(f"{b.name}:{h}" for b, h in zip(backends, self.hits, strict=True))
        return f"cache_aware prompt={self.num_tokens} hit={hits} -> {chosen.name}"


class CacheRouter:
    """Per-request cache predictions over the backends' views. Event-loop only.

    A session's previous prompt is kept (:class:`~kvroute.gateway.cacheview.keys.SessionKeys`,
    LRU, ``max_sessions``): when the new prompt extends it, only the new tokens are
    hashed (at one token; views with larger units hash their blocks, :func:`~kvroute.gateway.cacheview.view.unit_keys`).
    """

    def __init__(
        self, prompts: PromptTokens, logger: logging.Logger, max_sessions: int = 2048
    ) -> None:
        self.prompts = prompts
        self.logger = logger
        self.max_sessions = max_sessions
        self._next_request_id = 0
        self._keys = SessionKeys(max_sessions)

    def predict(
        self, body: Mapping[str, Any], backends: Sequence[Backend], session_key: str | None = None
    ) -> CachePrediction | None:
        """Predicted hits on each of ``backends``; None when the prompt cannot be
        tokenized (the policy then balances load)."""
        token_ids = self.prompts.token_ids(body, session_key)
        if token_ids is None or token_ids.shape[0] == 0:
            return None
        views = [backend.view() for backend in backends]
        token_keys = self._keys.keys(token_ids, session_key)
        by_kind: dict[tuple[int, bool], CacheSeq] = {}
        seqs: list[CacheSeq] = []
        hits: list[int] = []
        displaced: list[Displacement] = []
        tick = self._next_request_id
        for view in views:
            kind = view.seq_kind
            seq = by_kind.get(kind)
            if seq is None:
                seq = by_kind[kind] = view.seq(token_ids, token_keys)
            seqs.append(seq)
            hits.append(view.predict(seq))
            displaced.append(view.displaced(seq, tick))
        return CachePrediction(token_ids, token_keys, seqs, hits, displaced)

    def start(
        self,
        prediction: CachePrediction,
        backends: Sequence[Backend],
        chosen: Backend,
        body: Mapping[str, Any],
    ) -> CacheLease:
        """Pin the request in ``chosen``'s view; the lease records its end there."""
        request_id = self._next_request_id
        self._next_request_id += 1
        max_output = body.get("max_tokens") or body.get("max_completion_tokens")
        if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 1:
            max_output = DEFAULT_MAX_OUTPUT_TOKENS
        view = chosen.view()
        index = backends.index(chosen)
        view.start(request_id, prediction.seqs[index], prediction.token_ids, max_output)
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug(prediction.explain(backends, chosen))
        return CacheLease(self, view, request_id, prediction, chosen.name, prediction.hits[index])

    @property
    def tick(self) -> int:
        """The number of requests started so far (the views' clock for slot reuse)."""
        return self._next_request_id


@dataclass(frozen=True, slots=True)
class CacheLease:
    """One request pinned in the view of the backend the policy chose."""

    router: CacheRouter
    view: BackendCacheView
    request_id: int
    prediction: CachePrediction
    backend: str
    """The chosen backend's name."""
    predicted_cached_tokens: int
    """The prediction for the chosen backend."""

    def release(self, num_output_tokens: int) -> None:
        """The request ended having generated ``num_output_tokens``: its prompt and
        answer are now cached in the view (call once)."""
        self.view.finish(self.request_id, num_output_tokens, self.router.tick)
