"""llama.cpp slot model: slot choice, LCP reuse with one token recomputed, the host prompt
cache, unified vs per-slot contexts and --cache-reuse chunk shifting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cache_traces import pair
from kvroute.cache.base import AdmitStatus, CacheGeometry
from kvroute.cache.models.llamacpp import (
    LlamaCppConfig,
    LlamaCppPrefixCache,
    _chunk_reuse,
    ctx_per_slot,
)


def model(capacity: int | None = 10_000, **kw: object) -> LlamaCppPrefixCache:
    return LlamaCppPrefixCache(LlamaCppConfig(**kw), CacheGeometry(capacity))  # type: ignore[arg-type]


def run(m: LlamaCppPrefixCache, rid: int, tokens: list[int], output: int = 0) -> int:
    p = pair(1, tokens, output, rid, keep_ids=m.needs_token_ids)
    adm = m.pin(rid, p.prompt, p.final.num_tokens)
    assert adm.status is AdmitStatus.ADMITTED
    m.unpin(rid, p.final)
    m.check_invariants()
    return adm.cached_tokens


def test_defaults_match_llama_cpp() -> None:
    c = LlamaCppConfig()
    assert (c.num_slots, c.kv_unified, c.slot_prompt_similarity) == (4, True, 0.1)
    assert (c.cache_prompt, c.cache_reuse, c.cache_ram_mib, c.cache_idle_slots) == (
        True,
        0,
        8192,
        True,
    )


def test_reuse_is_the_lcp_with_the_chosen_slot_minus_one_token() -> None:
    m = model(cache_ram_mib=0)
    assert run(m, 0, [1, 2, 3, 4, 5, 6]) == 0
    assert run(m, 1, [1, 2, 3, 4, 5, 6, 7]) == 6  # extends the slot's sequence
    assert run(m, 2, [1, 2, 3, 4, 5, 6, 7]) == 6  # identical: one token recomputed
    assert run(m, 3, [1, 2, 9]) == 2


def test_slot_choice_by_similarity_else_least_recently_used() -> None:
    m = model(cache_ram_mib=0, num_slots=2)
    run(m, 0, list(range(20)))  # LRU among never-used slots: the last one (slot 1)
    run(m, 1, [100 + i for i in range(20)])  # similarity 0: LRU -> slot 0
    # Shares 50 % with the first prompt: chosen by similarity even though older.
    assert run(m, 2, list(range(10)) + [7] * 10) == 10
    # Below the 0.10 threshold (1/20): LRU slot instead, which holds the second prompt.
    assert run(m, 3, [0] + [9] * 19) == 0
    extra = m.stats().extra
    assert extra["slot_by_similarity"] == 1 and extra["slot_by_lru"] == 3


def test_host_prompt_cache_restores_an_evicted_slot() -> None:
    # One slot: each new conversation replaces the slot, which is saved to host memory first.
    m = model(cache_ram_mib=-1, num_slots=1)
    run(m, 0, list(range(40)))
    run(m, 1, [200 + i for i in range(40)])  # LRU pick: saves conversation 0 to RAM
    assert m.usage().host_cached_tokens == 40
    assert run(m, 2, [*list(range(40)), 1]) == 40  # restored from host memory
    assert m.stats().extra["ram_loaded_tokens"] == 40


def test_unified_buffer_clears_idle_slots_after_saving_them() -> None:
    m = model(cache_ram_mib=-1, num_slots=2)
    run(m, 0, list(range(30)))
    p = pair(1, [500] * 10)
    assert m.pin(1, p.prompt, 10).status is AdmitStatus.ADMITTED
    # The idle slot was saved to host memory and cleared from the unified pool.
    assert m.usage().cached_tokens == 0 and m.usage().host_cached_tokens == 30
    m.unpin(1, p.final)
    m.check_invariants()


def test_per_slot_context_and_too_large() -> None:
    assert ctx_per_slot(10_000, 4, kv_unified=False) == 2560  # 2500 padded to 256
    assert ctx_per_slot(10_000, 4, kv_unified=True) == 10_000
    m = model(1000, kv_unified=False, num_slots=4, cache_ram_mib=0)
    assert m.capacity_tokens == 1024
    assert m.pin(0, pair(1, [1] * 256).prompt, 256).status is AdmitStatus.TOO_LARGE
    p = pair(1, [1] * 100, output=500)
    assert m.pin(0, p.prompt, p.final.num_tokens).status is AdmitStatus.ADMITTED
    assert m.usage().pinned_tokens == 255  # generation stops at the slot's context


def test_all_slots_busy_means_wait() -> None:
    m = model(num_slots=1, cache_ram_mib=0)
    assert m.pin(0, pair(1, [1]).prompt, 1).status is AdmitStatus.ADMITTED
    assert m.pin(1, pair(1, [2]).prompt, 1).status is AdmitStatus.NO_ROOM
    assert m.match(pair(1, [1, 1]).prompt) == 0


def test_cache_reuse_shifts_chunks() -> None:
    m = model(cache_ram_mib=0, cache_reuse=3, num_slots=1)
    run(m, 0, [1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23])
    # After the common prefix [1, 2, 3], the cached chunk [20..23] reappears right away.
    assert run(m, 1, [1, 2, 3, 20, 21, 22, 23, 5]) == 7


def _reference_reuse(cache: list[int], prompt: list[int], n_past: int, min_chunk: int) -> int:
    """llama.cpp's loop, literally (server-context.cpp, --cache-reuse)."""
    head_c = head_p = n_past
    while head_c < len(cache) and head_p < len(prompt):
        n_match = 0
        while (
            head_c + n_match < len(cache)
            and head_p + n_match < len(prompt)
            and cache[head_c + n_match] == prompt[head_p + n_match]
        ):
            n_match += 1
        if n_match >= min_chunk:
            n_past += n_match
            head_c += n_match
            head_p += n_match
        else:
            head_c += 1
    return n_past


@settings(max_examples=300, deadline=None)
@given(
    cache=st.lists(st.integers(0, 3), max_size=40),
    prompt=st.lists(st.integers(0, 3), max_size=40),
    min_chunk=st.integers(1, 5),
)
def test_chunk_reuse_matches_llama_cpp_loop(
    cache: list[int], prompt: list[int], min_chunk: int
) -> None:
    n_past = 0
    for a, b in zip(cache, prompt, strict=False):
        if a != b:
            break
        n_past += 1
    got = _chunk_reuse(
        np.array(cache, dtype=np.uint32), np.array(prompt, dtype=np.uint32), n_past, min_chunk
    )
    assert got == _reference_reuse(cache, prompt, n_past, min_chunk)


def test_victim_is_the_slot_the_next_request_takes_and_what_it_overwrites() -> None:
    m = model(num_slots=2, cache_ram_mib=0)
    run(m, 0, list(range(40)), output=1)  # never-used slots: the last one, slot 1 (40 tokens)
    run(m, 1, list(range(100, 130)), output=1)  # slot 0 (30 tokens), used last
    # A continuation of request 0 goes back to slot 1 and overwrites none of it.
    assert m.victim(pair(1, [*range(40), 7, 8]).prompt) == (1, 0)
    # Similar enough (1 of 3 tokens) to slot 1: reuses one token, overwrites 39.
    assert m.victim(pair(1, [0, 900, 901]).prompt) == (1, 39)
    # Unrelated: the least recently used idle slot (1), all 40 tokens lost.
    assert m.victim(pair(1, [5000] * 3).prompt) == (1, 40)
    p = pair(1, [500] * 10)
    m.pin(2, p.prompt, p.final.num_tokens)
    assert m.slot_of(2) == 1
    # Slot 1 is busy now: the next unrelated prompt would take slot 0's 30 tokens.
    assert m.victim(pair(1, [5000] * 3).prompt) == (0, 30)
    p = pair(1, [600] * 10)
    m.pin(3, p.prompt, p.final.num_tokens)
    assert m.victim(pair(1, [1, 2]).prompt) is None  # every slot busy
