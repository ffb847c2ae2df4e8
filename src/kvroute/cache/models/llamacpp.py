"""llama.cpp server's slots: each keeps its last sequence; reuse is the LCP with the chosen slot.

Follows llama.cpp as vendored in llama-cpp-python 0.3.36 (llama.cpp commit 0c1e570):
``tools/server/server-context.cpp`` (``get_available_slot``, ``try_clear_idle_slots``,
the prompt-reuse block of ``update_slots`` with ``--cache-reuse`` chunk shifting and
``[TAG_PROMPT_LOGITS]``, ``cache_idle_slots`` after a launch), ``tools/server/server.cpp``
(``-np`` auto: 4 slots with a unified KV buffer), ``common/common.h`` / ``common/arg.cpp``
(defaults) and ``src/llama-context.cpp`` (``n_ctx_seq``). The host-memory prompt cache is
:mod:`kvroute.cache.models.prompt_cache`.

- ``--parallel`` slots share ``-c`` tokens: with ``--kv-unified`` (the default when ``-np``
  is not given) every slot may use the whole pool; otherwise each slot gets
  ``ceil256(n_ctx / np)`` tokens.
- Slot choice: among idle slots holding tokens, the one with the highest
  ``LCP / prompt_len`` above ``--slot-prompt-similarity`` (default 0.10); otherwise the
  least recently used idle slot (the last one among ties).
- With ``--cache-ram`` (default 8192 MiB): before reusing a slot chosen by LRU, or by
  similarity when it would keep under half of its content, the slot is saved to host
  memory and the best saved state (if better) is restored into it; after each launch every
  idle slot is saved and, with a unified KV buffer, cleared (``--cache-idle-slots``).
- Reuse is the LCP of the slot's tokens and the prompt (``cache_prompt``), extended by
  ``--cache-reuse`` chunk shifting when set; one prompt token is always recomputed.
- A request that finds every slot busy is deferred; each slot released moves the oldest
  deferred one to the front of the task queue (``server-queue.cpp``), so a step that
  frees several slots restarts them newest first (``schedule_order``).
- A prompt of ``n_ctx`` tokens or more for its slot is refused; generation stops one
  token before the slot's context is full. With a unified buffer that runs short, idle
  slots are purged one at a time in slot order.

Deviations: where a unified buffer is full of running slots llama.cpp fails the decode;
here the request waits. Context shifting, SWA/recurrent checkpoints, speculative decoding,
LoRA and multimodal prompts are not modelled. ``--cache-reuse`` needs token ids, so it is
ignored on hash-only traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvroute.cache.base import (
    NO_ROOM,
    TOO_LARGE,
    Admission,
    AdmitStatus,
    CacheGeometry,
    CacheSeq,
    CacheStats,
    CacheUsage,
    units_for,
)
from kvroute.cache.models.chunk_reuse import chunk_reuse as _chunk_reuse
from kvroute.cache.models.prompt_cache import HostPromptCache, SavedPrompt, SaveResult
from kvroute.cache.models.shared import Admitted, check

MIB = 1 << 20
_UNBOUNDED = 1 << 62


@dataclass(frozen=True, slots=True)
class LlamaCppConfig:
    num_slots: int = 4
    """``--parallel`` (auto: 4)."""
    kv_unified: bool = True
    """``--kv-unified`` (on when ``--parallel`` is auto)."""
    slot_prompt_similarity: float = 0.1
    """``--slot-prompt-similarity`` (0 disables similarity-based slot choice)."""
    cache_prompt: bool = True
    cache_reuse: int = 0
    """``--cache-reuse``: minimum chunk to reuse by KV shifting (0: off)."""
    cache_ram_mib: int = 8192
    """``--cache-ram``: host prompt cache in MiB (-1: limited to n_ctx tokens, 0: off)."""
    cache_idle_slots: bool = True
    """``--cache-idle-slots`` (needs the host prompt cache)."""


@dataclass(slots=True)
class _Slot:
    index: int
    content: SavedPrompt | None = None
    """The slot's KV when idle (``None``: empty); ``None`` while running."""
    footprint: int = 0
    """Pool tokens the slot holds: its content when idle, its reservation when running."""
    t_last: int = -1
    running: int | None = None


def ctx_per_slot(n_ctx: int, num_slots: int, kv_unified: bool) -> int:
    """llama.cpp's ``n_ctx_seq``: the whole pool when unified, else a 256-padded share."""
    if kv_unified:
        return n_ctx
    share = n_ctx // num_slots
    return -(-share // 256) * 256


def ram_limit_tokens(
    config: LlamaCppConfig, n_ctx: int | None, kv_bytes_per_token: int | None
) -> int | None:
    """The host prompt cache limit in tokens (``None``: unlimited). See prompt_cache.py.
    Without KV bytes per token a MiB limit cannot be converted; ``n_ctx`` is used, the
    token floor llama.cpp applies anyway."""
    if config.cache_ram_mib > 0 and kv_bytes_per_token:
        return config.cache_ram_mib * MIB // kv_bytes_per_token
    return n_ctx


class LlamaCppPrefixCache:
    """llama.cpp server slots over units of ``unit_tokens`` (1 token, or a trace block)."""

    name = "llamacpp"

    def __init__(self, config: LlamaCppConfig, geometry: CacheGeometry) -> None:
        if config.num_slots < 1:
            raise ValueError("llama.cpp needs at least one slot")
        self.config = config
        self._unit = geometry.block_size_tokens or 1
        cap = geometry.capacity_tokens
        if cap is None:
            self._n_ctx: int | None = None
            self._slot_ctx = _UNBOUNDED
        else:
            self._slot_ctx = ctx_per_slot(cap, config.num_slots, config.kv_unified)
            self._n_ctx = self._slot_ctx if config.kv_unified else self._slot_ctx * config.num_slots
        self._slots = [_Slot(i) for i in range(config.num_slots)]
        self._num_slots = config.num_slots
        self._by_request: dict[int, _Slot] = {}
        self._ram: HostPromptCache | None = None
        if config.cache_ram_mib != 0:
            self._ram = HostPromptCache(
                ram_limit_tokens(config, self._n_ctx, geometry.kv_bytes_per_token),
                self._unit,
            )
        self._keep_tokens = config.cache_reuse > 0 and geometry.block_size_tokens is None
        self._clock = 0
        self._running_tokens = 0
        self._idle_tokens = 0
        self._evicted = 0
        self._num_evictions = 0
        self._peak_pinned = 0
        self._extra = {
            "slot_by_similarity": 0,
            "slot_by_lru": 0,
            "purged_tokens": 0,
            "cache_reuse_tokens": 0,
        }
        self._next_insert_id = -1
        self._admitted = Admitted()

    @property
    def unit_tokens(self) -> int:
        return self._unit

    @property
    def capacity_tokens(self) -> int | None:
        return self._n_ctx

    @property
    def needs_token_ids(self) -> bool:
        """``--cache-reuse`` on a token trace compares raw tokens."""
        return self._keep_tokens

    # -- slot choice ----------------------------------------------------------------------

    def _lcp(self, content: SavedPrompt | None, seq: CacheSeq) -> int:
        return 0 if content is None else content.lcp_tokens(seq.key_list(), seq.num_tokens)

    def _pick(self, seq: CacheSeq) -> tuple[_Slot, bool, bool]:
        """``get_available_slot``: the slot, whether it was chosen by prompt similarity,
        and whether to update the host prompt cache (chosen by LRU, or by similarity but
        keeping under half of the slot). Needs an idle slot; no mutation."""
        total = seq.num_tokens
        threshold = self.config.slot_prompt_similarity
        best: _Slot | None = None
        best_sim = 0.0
        best_lcp = 0
        if threshold != 0.0 and total > 0:
            keys = seq.key_list()
            for slot in self._slots:
                content = slot.content
                if slot.running is not None or content is None or not content.num_tokens:
                    continue
                lcp = content.lcp_tokens(keys, total)
                sim = lcp / total
                if sim > best_sim and sim > threshold:
                    best, best_sim, best_lcp = slot, sim, lcp
        if best is not None:
            assert best.content is not None
            return best, True, best_lcp / best.content.num_tokens < 0.5
        lru: _Slot | None = None
        for slot in self._slots:
            if slot.running is None and (lru is None or slot.t_last <= lru.t_last):
                lru = slot
        assert lru is not None
        return lru, False, True

    def _n_past(self, content: SavedPrompt | None, seq: CacheSeq) -> int:
        """Prompt tokens reused from ``content``: LCP, ``--cache-reuse`` chunks, minus the
        one token that is always evaluated."""
        if not self.config.cache_prompt or content is None:
            return 0
        n_past = self._lcp(content, seq)
        if self._keep_tokens:
            n_past = _chunk_reuse(content.token_ids, seq.token_ids, n_past, self.config.cache_reuse)
        return n_past - 1 if n_past == seq.num_tokens and n_past > 0 else n_past

    def match(self, seq: CacheSeq) -> int:
        if len(self._by_request) >= self._num_slots:  # every slot busy
            return 0
        slot, _by_similarity, update_cache = self._pick(seq)
        content = slot.content
        if update_cache and self._ram is not None:
            content = self._ram.choose(content, seq) or content
        return self._n_past(content, seq)

    def victim(self, seq: CacheSeq) -> tuple[int, int] | None:
        """The idle slot llama-server would give ``seq`` now (its index) and how many of
        the tokens it holds ``seq`` would overwrite (those beyond the reused prefix);
        ``None`` when every slot is busy. Ignores the host prompt cache (which saves a
        slot before it is reused). Does not mutate."""
        if len(self._by_request) >= self._num_slots:
            return None
        slot, _by_similarity, _update_cache = self._pick(seq)
        content = slot.content
        lost = 0 if content is None else max(content.num_tokens - self._n_past(content, seq), 0)
        return slot.index, lost

    def slot_of(self, request_id: int) -> int:
        """The index of the slot a running request holds."""
        return self._by_request[request_id].index

    # -- lifecycle ------------------------------------------------------------------------

    def pin(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        if request_id in self._by_request:
            raise ValueError(f"request {request_id} is already running")
        if self._n_ctx is not None and seq.num_tokens >= self._slot_ctx:
            return TOO_LARGE
        if len(self._by_request) >= self._num_slots:  # every slot busy
            return NO_ROOM
        footprint = min(final_tokens, self._slot_ctx - 1)
        unified_pool = self._n_ctx if self.config.kv_unified else None
        if unified_pool is not None and self._running_tokens + footprint > unified_pool:
            return NO_ROOM
        slot, by_similarity, update_cache = self._pick(seq)
        self._extra["slot_by_similarity" if by_similarity else "slot_by_lru"] += 1
        ram = self._ram
        if update_cache and ram is not None:
            if slot.content is not None:
                ram.save(slot.content)
            loaded = ram.load(slot.content, seq)
            if loaded is not None:
                self._replace(slot, loaded)
            ram.update()
        content = slot.content
        n_past = self._n_past(content, seq)
        if content is not None and self._keep_tokens:
            self._extra["cache_reuse_tokens"] += max(0, n_past - self._lcp(content, seq))
        if content is not None:
            self._drop(content.num_tokens - n_past)
            self._idle_tokens -= slot.footprint
        slot.content = None
        slot.running = request_id
        slot.footprint = footprint
        self._running_tokens += footprint
        self._peak_pinned = max(self._peak_pinned, self._running_tokens)
        self._by_request[request_id] = slot
        if ram is not None and self.config.cache_idle_slots:
            self._cache_idle_slots(ram)
        if self.config.kv_unified and self._n_ctx is not None:
            self._purge_until(self._n_ctx)
        return self._admitted[n_past]

    def _replace(self, slot: _Slot, state: SavedPrompt) -> None:
        """Restore a saved state into an idle slot (its old content is gone from the pool)."""
        if slot.content is not None:
            self._drop(slot.content.num_tokens)
        self._idle_tokens += state.num_tokens - slot.footprint
        slot.content = state
        slot.footprint = state.num_tokens

    def _drop(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self._evicted += num_tokens
            self._num_evictions += 1

    def _clear(self, slot: _Slot) -> int:
        dropped = slot.footprint
        self._drop(dropped)
        self._idle_tokens -= dropped
        slot.content = None
        slot.footprint = 0
        return dropped

    def _cache_idle_slots(self, ram: HostPromptCache) -> None:
        for slot in self._slots:
            if slot.running is None and slot.content is not None:
                if ram.save(slot.content) is SaveResult.SAVED:
                    ram.update()
                if self.config.kv_unified:
                    self._clear(slot)

    def _purge_until(self, limit: int) -> None:
        """``try_clear_idle_slots``: clear idle slots in slot order while over ``limit``."""
        for slot in self._slots:
            if self._running_tokens + self._idle_tokens <= limit:
                return
            if slot.running is None and slot.footprint:
                self._extra["purged_tokens"] += self._clear(slot)

    def unpin(self, request_id: int, final: CacheSeq) -> None:
        slot = self._by_request.pop(request_id)
        n = min(final.num_tokens, slot.footprint)
        keep = min(final.num_keys, units_for(n, final.unit_tokens))
        token_ids = final.token_ids[:n].copy() if final.token_ids is not None else None
        slot.content = SavedPrompt(final.keys[:keep].copy(), n, final.unit_tokens, token_ids)
        self._running_tokens -= slot.footprint
        self._idle_tokens += n
        slot.footprint = n
        slot.running = None
        self._clock += 1
        slot.t_last = self._clock

    def insert(self, seq: CacheSeq) -> int:
        rid = self._next_insert_id
        self._next_insert_id -= 1
        adm = self.pin(rid, seq, seq.num_tokens)
        if adm.status is not AdmitStatus.ADMITTED:
            return 0
        self.unpin(rid, seq)
        return adm.cached_tokens

    def evict(self, num_tokens: int) -> int:
        """Clear idle slots in slot order (``try_clear_idle_slots``) until enough is gone."""
        evicted = 0
        for slot in self._slots:
            if evicted >= num_tokens:
                break
            if slot.running is None and slot.footprint:
                evicted += self._clear(slot)
        return evicted

    def schedule_order(
        self, waiting: Sequence[CacheSeq], *, num_released: int = 0
    ) -> Sequence[int]:
        """Waiting requests are llama.cpp's deferred tasks (they found every slot busy).
        Each slot released moves the oldest deferred task to the *front* of the task queue
        (``callback_on_release`` -> ``server_queue::pop_deferred_task``), so a step that
        frees ``k`` slots restarts the ``k`` oldest newest first, then the rest in order."""
        n = len(waiting)
        k = min(num_released, n)
        if k < 2:
            return range(n)
        return [*range(k - 1, -1, -1), *range(k, n)]

    def release_order(self, request_ids: Sequence[int]) -> Sequence[int]:
        """``update_slots`` releases finished slots in slot order."""
        slots = self._by_request
        return sorted(request_ids, key=lambda rid: slots[rid].index)

    def usage(self) -> CacheUsage:
        cap = self._n_ctx
        return CacheUsage(
            capacity_tokens=cap,
            free_tokens=None if cap is None else cap - self._running_tokens - self._idle_tokens,
            cached_tokens=self._idle_tokens,
            pinned_tokens=self._running_tokens,
            num_running=len(self._by_request),
            host_cached_tokens=0 if self._ram is None else self._ram.total_tokens,
        )

    def stats(self) -> CacheStats:
        extra = dict(self._extra)
        if self._ram is not None:
            extra["ram_saved_tokens"] = self._ram.saved_tokens
            extra["ram_loaded_tokens"] = self._ram.loaded_tokens
            extra["ram_dropped_tokens"] = self._ram.dropped_tokens
        return CacheStats(self._evicted, self._num_evictions, self._peak_pinned, extra)

    def check_invariants(self) -> None:
        running = idle = 0
        for slot in self._slots:
            check(slot.footprint >= 0, f"slot {slot.index}: negative footprint")
            check(slot.footprint <= self._slot_ctx, f"slot {slot.index}: over its context")
            if slot.running is not None:
                check(slot.content is None, f"slot {slot.index}: running with idle content")
                check(self._by_request.get(slot.running) is slot, "request/slot map drifted")
                running += slot.footprint
            else:
                size = 0 if slot.content is None else slot.content.num_tokens
                check(size == slot.footprint, f"slot {slot.index}: content != footprint")
                idle += slot.footprint
        check(
            len(self._by_request) == sum(s.running is not None for s in self._slots),
            "running count drifted",
        )
        check(running == self._running_tokens, "pinned tokens drifted")
        check(idle == self._idle_tokens, "cached tokens drifted")
        if self._n_ctx is not None:
            check(running + idle <= self._n_ctx, "free + cached + pinned != capacity")
        if self._ram is not None:
            self._ram.check_invariants()
