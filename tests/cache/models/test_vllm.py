"""vLLM APC model: block hits with the L-1 cap, reference counts, free-queue order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cache_traces import pair
from kvroute.cache.base import AdmitStatus, CacheGeometry, CacheSeq
from kvroute.cache.models.vllm import VllmConfig, VllmPrefixCache

B = 4


def model(capacity: int | None, max_num_seqs: int = 256) -> VllmPrefixCache:
    return VllmPrefixCache(
        VllmConfig(block_size_tokens=B, max_num_seqs=max_num_seqs), CacheGeometry(capacity)
    )


def run(m: VllmPrefixCache, rid: int, tokens: list[int], output: int = 0) -> int:
    p = pair(B, tokens, output, rid)
    adm = m.pin(rid, p.prompt, p.final.num_tokens)
    assert adm.status is AdmitStatus.ADMITTED
    m.unpin(rid, p.final)
    m.check_invariants()
    return adm.cached_tokens


def test_only_full_blocks_hit_and_a_full_prompt_recomputes_its_last_block() -> None:
    m = model(None)
    assert run(m, 0, list(range(10))) == 0  # blocks [0..3] [4..7] cached, 2 tokens partial
    assert run(m, 1, [*list(range(10)), 99]) == 8  # two full blocks
    assert run(m, 2, list(range(6))) == 4  # one block; the second is partial
    assert run(m, 3, list(range(8))) == 4  # fully cached: capped at L - 1 = 7 -> 1 block
    assert m.match(pair(B, list(range(8))).prompt) == 4
    assert m.match(pair(B, list(range(9))).prompt) == 8


def test_pool_reserves_the_null_block() -> None:
    m = model(40)  # 10 blocks, one is vLLM's null block
    assert m.capacity_tokens == 36
    assert m.usage().free_tokens == 36
    assert m.pin(0, pair(B, list(range(37))).prompt, 37).status is AdmitStatus.TOO_LARGE


def test_freed_blocks_are_evicted_tail_first() -> None:
    m = model(5 * B)  # 4 usable blocks
    run(m, 0, [1] * 8 + [2] * 8)  # 4 blocks: a1 a2 a3 a4, freed as a4 a3 a2 a1
    # A new 1-block prompt needs one block: the queue head is a4 (the tail of request 0).
    run(m, 1, [7] * 3)
    assert m.match(pair(B, [1] * 8 + [2] * 4 + [0]).prompt) == 12  # a1..a3 survive
    assert m.stats().evicted_tokens == 4


def test_running_blocks_are_pinned_not_evictable() -> None:
    m = model(5 * B)
    p = pair(B, [1] * 8)
    assert m.pin(0, p.prompt, p.final.num_tokens).status is AdmitStatus.ADMITTED
    assert m.usage().pinned_tokens == 8
    # 3 more blocks do not fit next to 2 pinned ones (4 usable): the request waits.
    assert m.pin(1, pair(B, [5] * 12).prompt, 12).status is AdmitStatus.NO_ROOM
    assert m.evict(100) == 0 and m.usage().pinned_tokens == 8
    # A second request sharing the prefix shares the pinned blocks.
    q = pair(B, [1] * 8 + [3])
    adm = m.pin(1, q.prompt, q.final.num_tokens)
    assert adm.cached_tokens == 8 and m.usage().pinned_tokens == 12
    m.check_invariants()
    m.unpin(0, p.final)
    m.unpin(1, q.final)
    m.check_invariants()
    assert m.usage().pinned_tokens == 0


def test_generated_tokens_are_cached() -> None:
    m = model(None)
    p = pair(B, [1, 2, 3, 4, 5, 6], output=5)  # final: 6 + 4 tokens -> 2 full blocks + 2
    assert m.pin(0, p.prompt, p.final.num_tokens).status is AdmitStatus.ADMITTED
    m.unpin(0, p.final)
    follow = p.final.keys  # a next turn that starts with prompt + answer
    assert len(follow) == 2
    assert m.usage().cached_tokens == 8  # two full blocks cached, the partial one freed


def test_max_num_seqs() -> None:
    m = model(None, max_num_seqs=1)
    assert m.pin(0, pair(B, [1]).prompt, 1).status is AdmitStatus.ADMITTED
    assert m.pin(1, pair(B, [2]).prompt, 1).status is AdmitStatus.NO_ROOM


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["match-pin", "match-unpin-pin", "match-evict-pin", "unpin"]),
            st.integers(0, 5),
            st.integers(0, 9),
        ),
        max_size=40,
    )
)
def test_a_pin_after_a_match_admits_as_a_pin_alone(script: list[tuple[str, int, int]]) -> None:
    """The gateway asks ``match`` and then pins the same sequence: the model reuses the
    match's run of hits, and must admit exactly as without the match, also when the
    pool changed in between (a request ended, blocks were evicted)."""
    prompts = [[p % 3, *range(10 * p, 10 * p + 13 + p)] for p in range(6)]
    asked, alone = model(64), model(64)
    running: dict[int, CacheSeq] = {}

    def end_one(i: int) -> None:
        if running:
            done = sorted(running)[i % len(running)]
            final = running.pop(done)
            asked.unpin(done, final)
            alone.unpin(done, final)

    for rid, (kind, i, out) in enumerate(script):
        if kind == "unpin":
            end_one(i)
            continue
        p = pair(B, prompts[(rid + i) % 6], out, rid)
        asked.match(p.prompt)
        if kind == "match-unpin-pin":
            end_one(i)
        elif kind == "match-evict-pin":
            assert asked.evict(8) == alone.evict(8)
        a = asked.pin(rid, p.prompt, p.final.num_tokens)
        b = alone.pin(rid, p.prompt, p.final.num_tokens)
        assert (a.status, a.cached_tokens) == (b.status, b.cached_tokens)
        assert (asked.usage(), asked.stats()) == (alone.usage(), alone.stats())
        if a.status is AdmitStatus.ADMITTED:
            running[rid] = p.final
        asked.check_invariants()
