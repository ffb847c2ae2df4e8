"""The pair sample is uniform over requests and its LCPs are exact."""

from __future__ import annotations

import numpy as np

from kvroute.analyze.pairwise import PairSampler


def test_reservoir_is_uniform_over_the_trace() -> None:
    hits = np.zeros(1000)
    for seed in range(300):
        sampler = PairSampler(np.random.default_rng(seed), reservoir_size=20)
        for i in range(1000):
            sampler.add(np.array([i], dtype=np.uint32), 1)
        for units, _ in sampler._items:
            hits[int(units[0])] += 1
    # Each request is kept with probability 20/1000; compare early, middle and late tenths.
    tenths = hits.reshape(10, 100).sum(axis=1) / (300 * 20 / 10)
    assert np.all(np.abs(tenths - 1) < 0.15), tenths


def test_pairwise_lcp_values() -> None:
    sampler = PairSampler(np.random.default_rng(0), reservoir_size=10)
    a = np.arange(40, dtype=np.uint32)
    b = np.concatenate([np.arange(20, dtype=np.uint32), np.full(20, 999, dtype=np.uint32)])
    sampler.add(a, 40)
    sampler.add(b, 40)
    res = sampler.finish(unit_tokens=1, block_size_tokens=16)
    assert res.num_pairs == 1 and res.lcp_tokens.max == 20 and res.lcp_share.max == 0.5
    assert res.share_pairs_sharing_a_prefix == 1.0
