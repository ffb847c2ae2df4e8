"""Stack distances are exact; sampled estimates stay close to the exact curve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvroute.analyze.reuse import ReuseTracker, stack_distances


def _brute(keys: list[int]) -> list[int]:
    out = []
    for i, k in enumerate(keys):
        prev = next((j for j in range(i - 1, -1, -1) if keys[j] == k), None)
        out.append(-1 if prev is None else len(set(keys[prev + 1 : i])))
    return out


@given(st.lists(st.integers(0, 12), max_size=80))
def test_stack_distances_exact(keys: list[int]) -> None:
    assert stack_distances(keys).tolist() == _brute(keys)


def _lru_hits(keys: list[int], capacity: int) -> int:
    cache: list[int] = []
    hits = 0
    for k in keys:
        if k in cache:
            hits += 1
            cache.remove(k)
        elif len(cache) == capacity:
            cache.pop(0)
        cache.append(k)
    return hits


def test_hit_curve_matches_an_lru_simulation() -> None:
    rng = np.random.default_rng(1)
    keys = (rng.zipf(1.3, size=3000) % 400).astype(np.uint64)
    tracker = ReuseTracker(1)
    tracker.add_chunk(keys, np.full(len(keys), np.nan), len(keys))
    caps = [1, 4, 16, 64, 256]
    result = tracker.finish(caps)
    assert result.sample_rate == 1.0
    for cap, hit in zip(caps, result.hit_ratio, strict=True):
        assert hit * len(keys) == pytest.approx(_lru_hits(keys.tolist(), cap))


def test_sampling_keeps_the_curve_close() -> None:
    rng = np.random.default_rng(2)
    mixed = rng.integers(0, 1 << 62, size=20_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    stream = mixed[rng.integers(0, 20_000, size=60_000)]  # reuse spread over many blocks
    exact, sampled = ReuseTracker(16), ReuseTracker(16, max_samples=8_000)
    for chunk in np.array_split(stream, 30):  # several chunks, so the sample rate adapts
        nan = np.full(len(chunk), np.nan)
        exact.add_chunk(chunk, nan, 16 * len(chunk))
        sampled.add_chunk(chunk, nan, 16 * len(chunk))
    caps = [1_024, 16_384, 131_072]
    e = exact.finish(caps)
    s = sampled.finish(caps, e.infinite_hit_ratio)
    assert s.sample_rate < 0.25 and s.num_sampled_accesses <= 8_000
    assert s.infinite_hit_ratio == e.infinite_hit_ratio  # the level is the exact one
    for a, b in zip(e.hit_ratio, s.hit_ratio, strict=True):
        assert abs(a - b) < 0.02


def test_reuse_time_bins_are_round_1_2_5_edges() -> None:
    import numpy as np

    from kvroute.analyze.reuse import _log_hist
    from kvroute.report import fmt
    from kvroute.report.charts.svg import bin_labels

    edges, counts = _log_hist(np.array([0.00012, 0.003, 0.04, 0.9]))
    assert edges[:4] == [0.0001, 0.0002, 0.0005, 0.001] and sum(counts) == 4
    assert bin_labels(edges, fmt.duration)[0] == "100 µs–200 µs"


def test_reuse_time_bins_past_a_minute_are_clock_steps() -> None:
    import numpy as np

    from kvroute.analyze.reuse import _log_hist
    from kvroute.report import fmt
    from kvroute.report.charts.svg import bin_labels

    edges, counts = _log_hist(np.array([0.5, 30.0, 90.0, 400.0, 2000.0]))
    assert sum(counts) == 5
    labels = bin_labels(edges, fmt.duration)
    assert labels[-6:] == (
        "50 s–1 min",
        "1 min–2 min",
        "2 min–5 min",
        "5 min–10 min",
        "10 min–30 min",
        "30 min–1 h",
    )
