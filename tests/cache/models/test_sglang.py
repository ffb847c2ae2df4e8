"""SGLang RadixAttention model: token-level hits, node splits, locks, LRU leaf eviction,
the whole-allocation eviction quirk and LPM scheduling."""

from __future__ import annotations

from cache.cache_traces import pair
from kvroute.cache.base import AdmitStatus, CacheGeometry
from kvroute.cache.models.sglang import SchedulePolicy, SglangConfig, SglangPrefixCache


def model(capacity: int | None, **kw: object) -> SglangPrefixCache:
    return SglangPrefixCache(SglangConfig(**kw), CacheGeometry(capacity))  # type: ignore[arg-type]


def run(m: SglangPrefixCache, rid: int, tokens: list[int], output: int = 0) -> int:
    p = pair(m.unit_tokens, tokens, output, rid)
    adm = m.pin(rid, p.prompt, p.final.num_tokens)
    assert adm.status is AdmitStatus.ADMITTED
    m.unpin(rid, p.final)
    m.check_invariants()
    return adm.cached_tokens


def test_token_level_hits_capped_at_prompt_minus_one() -> None:
    m = model(None)
    assert run(m, 0, [1, 2, 3, 4, 5]) == 0
    assert run(m, 1, [1, 2, 3, 9]) == 3  # partial match splits the node after 3 tokens
    assert run(m, 2, [1, 2, 3, 4, 5]) == 4  # fully cached: one token recomputed
    assert m.match(pair(1, [1, 2, 7]).prompt) == 2


def test_page_size_aligns_hits() -> None:
    m = model(None, page_size=4)
    assert m.unit_tokens == 4
    assert run(m, 0, list(range(10))) == 0
    assert run(m, 1, [*list(range(9)), 50]) == 8
    assert run(m, 2, list(range(7))) == 4  # cap 6 -> one page
    assert run(m, 3, list(range(8))) == 4  # cap 7 -> one page


def test_lru_leaf_eviction_cascades_and_spares_locked_paths() -> None:
    m = model(12)
    run(m, 0, [1, 1, 1, 1])  # leaf A
    run(m, 1, [2, 2, 2, 2])  # leaf B (more recent)
    p = pair(1, [2, 2, 2, 2, 3])
    assert m.pin(2, p.prompt, p.final.num_tokens).cached_tokens == 4  # locks B's path
    # 12 units: B(4, locked) + C's own unit (1) + A(4) = 9 used, 3 free. Needing 5 more
    # asks the tree to evict 5 (SGLang evicts the whole allocation size): A goes.
    q = pair(1, [4] * 5)
    assert m.pin(3, q.prompt, q.final.num_tokens).status is AdmitStatus.ADMITTED
    assert m.stats().evicted_tokens == 4
    assert m.match(pair(1, [2, 2, 2, 2, 9]).prompt) == 4  # B survived: it was locked
    assert m.match(pair(1, [1, 1, 1, 9]).prompt) == 0
    m.check_invariants()


def test_no_room_leaves_the_cache_unchanged() -> None:
    m = model(8)
    p = pair(1, [1] * 6)
    assert m.pin(0, p.prompt, p.final.num_tokens).status is AdmitStatus.ADMITTED
    before = (m.usage(), m.stats())
    assert m.pin(1, pair(1, [2] * 4).prompt, 4).status is AdmitStatus.NO_ROOM
    assert (m.usage(), m.stats()) == before
    assert m.pin(1, pair(1, [2] * 9).prompt, 9).status is AdmitStatus.TOO_LARGE


def test_lpm_orders_by_cached_prefix_and_defers_in_batch_duplicates() -> None:
    m = model(None, schedule_policy=SchedulePolicy.LPM)
    run(m, 0, list(range(100)))
    waiting = [
        pair(1, [500 + i for i in range(40)] + [1]).prompt,  # no hit, new 40-token prefix
        pair(1, [*list(range(50)), 7]).prompt,  # 50 cached
        pair(1, [500 + i for i in range(40)] + [2]).prompt,  # shares 40 with the first
        pair(1, [*list(range(90)), 7]).prompt,  # 90 cached
    ]
    assert list(m.schedule_order(waiting)) == [3, 1, 0, 2]
    fcfs = model(None)
    assert list(fcfs.schedule_order(waiting)) == [0, 1, 2, 3]


def test_lpm_falls_back_to_fcfs_above_128_waiting() -> None:
    m = model(None, schedule_policy=SchedulePolicy.LPM)
    run(m, 0, list(range(10)))
    waiting = [pair(1, [99]).prompt] * 127 + [pair(1, list(range(10))).prompt]
    assert next(iter(m.schedule_order(waiting))) == 127  # 128 waiting: LPM
    assert list(m.schedule_order([*waiting, waiting[0]])) == list(range(129))  # 129: FCFS
