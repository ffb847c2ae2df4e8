"""Consistency checks of the vLLM and llama.cpp models' internal state, for tests.

They read the models' private fields: the models' ``check_invariants`` delegate here, so
the models' own modules hold only what a replay runs. Raise
:class:`~kvroute.cache.models.shared.InvariantViolation` on the first inconsistency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvroute.cache.models.shared import check

if TYPE_CHECKING:
    from kvroute.cache.models.llamacpp import LlamaCppPrefixCache
    from kvroute.cache.models.vllm import VllmPrefixCache, _Block


def vllm_invariants(model: VllmPrefixCache) -> None:
    holders: dict[int, int] = {}
    held: list[_Block] = []
    for blocks, start in model._held.values():
        check(len({id(b) for b in blocks}) == len(blocks), "a request holds a block twice")
        check(0 <= start <= len(blocks), "hash count out of range")
        refs = [b.ref for b in blocks]
        check(refs == sorted(refs, reverse=True), "reference counts grow along a request")
        for b in blocks:
            holders[id(b)] = holders.get(id(b), 0) + 1
            held.append(b)
    queue: list[_Block] = []
    blk = model._queue.next
    while blk is not model._queue and len(queue) <= model._num_created:
        check(blk.prev.next is blk, "broken free-queue links")
        check(blk.ref == 0, "a queued block is pinned")
        queue.append(blk)
        blk = blk.next
    check(blk is model._queue, "the free queue does not end at its sentinel")
    check(len({id(b) for b in queue}) == len(queue), "a block is queued twice")
    check(len(queue) == model._num_queued, "queued count drifted")
    for b in held:
        check(b.ref == holders[id(b)], f"block {b.key}: ref {b.ref} != holders")
    for h, b in model._cached.items():
        check(b.key == h, "a block does not hold the hash mapped to it")
    check(
        {id(b) for b in model._cached.values()} <= {id(b) for b in [*held, *queue]},
        "a cached block is neither held nor queued",
    )
    check(all(b.key is None for b in model._spare), "a spare block holds a hash")
    check(len({id(b) for b in held}) == model._num_pinned, "pinned count drifted")
    check(
        sum(1 for b in queue if b.key is not None) == model._num_cached_free,
        "evictable count drifted",
    )
    check(model._num_fresh() >= 0, "negative fresh blocks")
    if model._num_blocks is not None:
        check(
            model._num_fresh() + model._num_queued + model._num_pinned == model._num_blocks,
            "free + cached + pinned != capacity",
        )


def llamacpp_invariants(model: LlamaCppPrefixCache) -> None:
    running = idle = 0
    for slot in model._slots:
        check(slot.footprint >= 0, f"slot {slot.index}: negative footprint")
        check(slot.footprint <= model._slot_ctx, f"slot {slot.index}: over its context")
        if slot.running is not None:
            check(slot.content is None, f"slot {slot.index}: running with idle content")
            check(model._by_request.get(slot.running) is slot, "request/slot map drifted")
            running += slot.footprint
        else:
            size = 0 if slot.content is None else slot.content.num_tokens
            check(size == slot.footprint, f"slot {slot.index}: content != footprint")
            idle += slot.footprint
    check(
        len(model._by_request) == sum(s.running is not None for s in model._slots),
        "running count drifted",
    )
    check(running == model._running_tokens, "pinned tokens drifted")
    check(idle == model._idle_tokens, "cached tokens drifted")
    if model._n_ctx is not None:
        check(running + idle <= model._n_ctx, "free + cached + pinned != capacity")
    ram = model._ram
    if ram is not None:
        check(ram.total_tokens == sum(s.num_tokens for s in ram.states), "host cache size drifted")
        if ram.limit_tokens is not None:
            check(ram.total_tokens <= ram.limit_tokens, "host cache over its limit")
