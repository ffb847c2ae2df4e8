"""The gateway's picture of each backend's prefix cache, for cache-aware routing.

Each backend gets the cache model of its engine (:mod:`kvroute.cache`: llama.cpp
slots, vLLM blocks, SGLang radix tree) sized from its configured capacity, and is fed
what the gateway routes there: a request is pinned when it is sent (its prompt) and
unpinned when it ends (prompt plus its output tokens from the upstream usage, as
unique pseudo tokens: they take room like the real ones but never match, so their keys
are serial numbers, not hashes: nothing is hashed at a request's end). The router
asks :meth:`BackendCacheView.predict` how many prompt tokens each backend would serve
from its cache. The picture is a model, not the engine's state: it is right when all
traffic to the backend goes through this gateway and the engine keeps what its model
says it keeps.

A view keys a prompt by the chained block hashes of :mod:`kvroute.trace.hashing` at its
model's unit: at one token the router's per-session keys (:mod:`kvroute.gateway.cacheview.keys`,
``chain_hashes(ids, 1)``), at vLLM's 16-token blocks ``chain_hashes(ids, 16)``: the one
key scheme, so a view's block keys are the very keys capture writes and the traffic
window counts. Prompt token ids come from :mod:`kvroute.gateway.prompts.tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvroute.cache.base import U64, AdmitStatus, CacheGeometry, CacheSeq, PrefixCache, units_for
from kvroute.cache.models.llamacpp import LlamaCppPrefixCache
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.trace.hashing import block_hashes, chain_hashes
from kvroute.types import TokenIds

DEFAULT_CAPACITY_TOKENS = {"llamacpp": 4 * 2048, "vllm": 65_536, "sglang": 65_536}
_PSEUDO_BASE = 0x8000_0000  # above any real vocabulary: output tokens that never match
_OUTPUT_KEY_BASE = np.uint64(0x9E37_79B9_7F4A_7C15)
"""Output tokens' keys are this plus a serial number: unique, so they match nothing (a
real prefix hash equals one with the odds of any 64-bit collision), and a sequence's
keys still agree with another's up to the first difference and never after."""


def unit_keys(token_ids: TokenIds, unit_tokens: int, token_keys: U64 | None = None) -> U64:
    """A model's keys at ``unit_tokens``: the chained hashes of the prompt's full units,
    ``chain_hashes(token_ids, unit_tokens)``; at one token, ``token_keys`` when the
    caller has them (the router's per-session chain)."""
    if unit_tokens == 1:
        return chain_hashes(token_ids, 1) if token_keys is None else token_keys
    return np.array(block_hashes(token_ids, unit_tokens, partial=False), dtype=np.uint64)


def _seq(token_ids: TokenIds, unit_tokens: int, keep_ids: bool, keys: U64) -> CacheSeq:
    n = int(token_ids.shape[0])
    return CacheSeq(
        keys=keys,
        num_tokens=n,
        num_units=units_for(n, unit_tokens),
        unit_tokens=unit_tokens,
        token_ids=token_ids if keep_ids else None,
    )


@dataclass(frozen=True, slots=True)
class Displacement:
    """What a request would overwrite on a backend: cached tokens of earlier requests."""

    num_tokens: int
    idle_requests: int
    """Requests routed (to any backend) since those tokens were last used."""


NO_DISPLACEMENT = Displacement(0, 0)


class BackendCacheView:
    """One backend's cache model and the requests pinned in it. Single-threaded."""

    def __init__(self, engine: str, config: CacheViewConfig) -> None:
        capacity = config.capacity_tokens or DEFAULT_CAPACITY_TOKENS[engine]
        vllm = VllmConfig()
        if config.block_size_tokens is not None:
            vllm = replace(vllm, block_size_tokens=config.block_size_tokens)
        settings = EngineSettings(llamacpp=config.llamacpp(), vllm=vllm)
        self.model: PrefixCache = cache_models(settings).get(engine)(CacheGeometry(capacity))
        model = self.model
        self.num_slots: int | None = (
            model.config.num_slots if isinstance(model, LlamaCppPrefixCache) else None
        )
        """Requests the engine runs at once (llama.cpp slots); None for the others."""
        self.seq_kind = (model.unit_tokens, model.needs_token_ids)
        """What a sequence for this model depends on besides the prompt (views of the
        same kind can share one)."""
        self._slot_victims: LlamaCppPrefixCache | None = (
            model
            if isinstance(model, LlamaCppPrefixCache) and model.config.cache_ram_mib == 0
            else None
        )
        self._pinned: dict[int, tuple[TokenIds, U64]] = {}
        """Request id -> its prompt's token ids and its keys at the model's unit."""
        self._next_pseudo = 0
        self._next_output_key = 0
        self._slot_used_at: dict[int, int] = {}  # llama.cpp slot -> router tick of its last end
        # Sent while the model had no room (every llama.cpp slot busy): the engine queues
        # them and runs them, oldest first, as requests end; so does the view.
        self._waiting: dict[int, tuple[CacheSeq, TokenIds, int]] = {}

    def seq(self, token_ids: TokenIds, token_keys: U64 | None = None) -> CacheSeq:
        """``token_ids`` as this model's sequence; ``token_keys`` are their per-token
        chained hashes (``chain_hashes(token_ids, 1)``) when the caller has them."""
        unit = self.model.unit_tokens
        return _seq(token_ids, *self.seq_kind, unit_keys(token_ids, unit, token_keys))

    def predict(self, seq: CacheSeq) -> int:
        """Prompt tokens the backend would serve from its cache now. Does not mutate."""
        return self.model.match(seq)

    def displaced(self, seq: CacheSeq, tick: int) -> Displacement:
        """llama.cpp: the idle slot the engine would give ``seq`` and what of it would be
        overwritten (its tokens beyond the reused prefix); ``tick`` is the router's request
        count now. Nothing for the other engines (they evict least recently used blocks)
        nor with llama.cpp's host prompt cache (``--cache-ram``: the slot is saved there
        before it is reused). Does not mutate."""
        model = self._slot_victims
        if model is None:
            return NO_DISPLACEMENT
        victim = model.victim(seq)
        if victim is None or victim[1] == 0:
            return NO_DISPLACEMENT
        index, lost = victim
        return Displacement(lost, tick - self._slot_used_at.get(index, tick))

    def start(
        self,
        request_id: int,
        seq: CacheSeq,
        token_ids: TokenIds,
        max_output: int,
    ) -> None:
        """A request was sent here: pin its prompt, or queue it while the model has no room
        (skipped when it can never fit)."""
        waiting = (seq, token_ids, max_output)
        if self._waiting or not self._pin(request_id, *waiting):
            self._waiting[request_id] = waiting

    def _pin(
        self,
        request_id: int,
        seq: CacheSeq,
        token_ids: TokenIds,
        max_output: int,
    ) -> bool:
        """Pin it; False when the model has no room now."""
        status = self.model.pin(request_id, seq, seq.num_tokens + max_output).status
        if status is AdmitStatus.ADMITTED:
            self._pinned[request_id] = (token_ids, seq.keys)
        return status is not AdmitStatus.NO_ROOM

    def finish(self, request_id: int, num_output_tokens: int, tick: int = 0) -> None:
        """The request ended with ``num_output_tokens`` generated: store what stays.
        ``tick``: the router's request count now (when its slot was last used)."""
        pinned = self._pinned.pop(request_id, None)
        if pinned is None:
            self._waiting.pop(request_id, None)
            return
        if isinstance(self.model, LlamaCppPrefixCache):
            self._slot_used_at[self.model.slot_of(request_id)] = tick
        token_ids, prompt_keys = pinned
        num_kept = max(num_output_tokens - 1, 0)  # the last token never gets KV
        pseudo = np.arange(self._next_pseudo, self._next_pseudo + num_kept, dtype=np.uint64)
        self._next_pseudo = (self._next_pseudo + num_kept) % (1 << 30)
        outputs = (pseudo + _PSEUDO_BASE).astype(np.uint32)
        final = np.concatenate((token_ids, outputs))
        # The units past the prompt's full ones hold output tokens: unique keys.
        unit = self.model.unit_tokens
        num_new = int(final.shape[0]) // unit - int(prompt_keys.shape[0])
        serial = self._next_output_key
        self._next_output_key += num_new
        output_keys = np.arange(serial, serial + num_new, dtype=np.uint64) + _OUTPUT_KEY_BASE
        keys = np.concatenate((prompt_keys, output_keys))
        self.model.unpin(request_id, _seq(final, *self.seq_kind, keys))
        while self._waiting:
            waiting_id = next(iter(self._waiting))
            if not self._pin(waiting_id, *self._waiting[waiting_id]):
                break
            del self._waiting[waiting_id]
