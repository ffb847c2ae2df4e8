"""FIFO and optimal eviction: hand-checked streams, a naive Belady, and the order
optimal >= LRU on random streams; the bounds in analyze's capacity curve."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.analyze.bounds import dense_codes, fifo_hits, next_uses, optimal_hits, policy_curves
from kvroute.analyze.reuse import ReuseTracker, stack_distances


def _codes(s: str) -> np.ndarray:
    return dense_codes(np.array([ord(c) for c in s], dtype=np.uint64))


def _naive_belady(stream: list[int], cap: int) -> int:
    cache: set[int] = set()
    hits = 0
    for t, k in enumerate(stream):
        if k in cache:
            hits += 1
            continue
        if len(cache) >= cap:
            rest = stream[t + 1 :]
            cache.remove(
                max(sorted(cache), key=lambda x: rest.index(x) if x in rest else len(stream))
            )
        cache.add(k)
    return hits


def test_hand_checked_stream() -> None:
    codes = _codes("abcabc")
    assert fifo_hits(codes, 2) == 0  # each access evicts the block needed next
    assert optimal_hits(codes, next_uses(codes), 2) == 2  # keep a, then c
    assert fifo_hits(codes, 3) == optimal_hits(codes, next_uses(codes), 3) == 3
    assert fifo_hits(_codes("abab"), 0) == 0


@pytest.mark.parametrize("seed", range(20))
def test_optimal_matches_naive_and_bounds_lru(seed: int) -> None:
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, 12, size=80).tolist()
    codes = dense_codes(np.array(stream, dtype=np.uint64))
    dist = stack_distances(stream)
    for cap in (1, 2, 4, 7):
        opt = optimal_hits(codes, next_uses(codes), cap)
        assert opt == _naive_belady(stream, cap)
        lru = int(np.sum((dist >= 0) & (dist < cap)))
        assert opt >= lru and opt >= fifo_hits(codes, cap)


def test_miniature_simulation_stays_close() -> None:
    rng = np.random.default_rng(0)
    # 200k accesses over 40k keys, a hot half and a cold tail, spread over the hash space
    hot = rng.integers(0, 4000, size=60_000)
    cold = rng.integers(4000, 40_000, size=60_000)
    raw = rng.permutation(np.concatenate([hot, cold])).astype(np.uint64)
    keys = raw * np.uint64(0x9E3779B97F4A7C15)
    full = policy_curves(keys, 1.0, [500, 2000], key_threshold=1 << 24, max_accesses=10**6)
    mini = policy_curves(keys, 1.0, [500, 2000], key_threshold=1 << 24, max_accesses=30_000)
    assert mini.sample_rate < 0.5 and full.sample_rate == 1.0
    for f, m in zip(
        full.optimal_hits + full.fifo_hits, mini.optimal_hits + mini.fifo_hits, strict=True
    ):
        share_f = f / full.num_reuses
        share_m = m / mini.num_reuses
        assert abs(share_f - share_m) < 0.03


def test_reuse_result_carries_bounds_in_order() -> None:
    rng = np.random.default_rng(1)
    tracker = ReuseTracker(16)
    systems = [rng.integers(1, 2**63, size=8, dtype=np.uint64) for _ in range(6)]
    for _ in range(300):
        blocks = np.concatenate(
            [systems[int(rng.integers(0, 6))], rng.integers(1, 2**63, size=4, dtype=np.uint64)]
        )
        tracker.add_chunk(blocks, np.zeros(blocks.shape[0]), 16 * blocks.shape[0])
    res = tracker.finish([256, 512, 1024, 4096, 1 << 20])
    for lru, fifo, opt in zip(
        res.hit_ratio, res.fifo_hit_ratio, res.optimal_hit_ratio, strict=True
    ):
        assert opt >= lru - 1e-12 and opt >= fifo - 1e-12
    assert res.optimal_hit_ratio[-1] == pytest.approx(res.infinite_hit_ratio)
    assert res.fifo_hit_ratio[-1] == pytest.approx(res.infinite_hit_ratio)
    assert res.bounds_sample_rate == 1.0
