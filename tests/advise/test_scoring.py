"""The interval and margin arithmetic of scoring.py."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.advise.base import EngineFigures
from kvroute.advise.options import Ops, Team
from kvroute.advise.scoring import (
    Interval,
    cluster_ids,
    difference,
    ratio_interval,
    requests_to_resolve,
    switching_margin,
)


def test_ratio_interval_is_the_token_weighted_ratio() -> None:
    iv = ratio_interval(np.array([50.0, 0.0, 100.0]), np.array([100.0, 100.0, 200.0]))
    assert iv.estimate == pytest.approx(150 / 400)
    assert iv.low < iv.estimate < iv.high


def test_clusters_widen_the_interval_of_correlated_requests() -> None:
    rng = np.random.default_rng(0)
    # 20 sessions of 10 requests: a session is all warm or all cold
    warm = np.repeat(rng.random(20) < 0.5, 10).astype(float)
    w = np.ones(200)
    alone = ratio_interval(warm, w)
    clustered = ratio_interval(warm, w, [i // 10 for i in range(200)])
    assert clustered.estimate == pytest.approx(alone.estimate)
    assert clustered.width > 2.5 * alone.width


def test_a_paired_difference_is_tighter_than_two_intervals() -> None:
    rng = np.random.default_rng(1)
    base = rng.random(300)
    w = np.ones(300)
    a = EngineFigures("sglang", "m", base + 0.02, w, 1)
    b = EngineFigures("vllm", "m", base, w, 1)
    d = difference(a, b)
    assert d.estimate == pytest.approx(0.02)
    assert d.width < 1e-9  # the same requests: the shared noise cancels
    with pytest.raises(ValueError, match="different requests"):
        difference(a, EngineFigures("vllm", "m", base[:10], w[:10], 1))


def test_cluster_ids_keep_none_apart() -> None:
    assert cluster_ids(["a", None, "a", None, "b"]) == [0, -2, 0, -4, 1]


def test_margins() -> None:
    assert switching_margin(Team(1, Ops.MEDIUM)) == pytest.approx(0.10)
    assert switching_margin(Team(3, Ops.MEDIUM)) == pytest.approx(0.05)
    assert switching_margin(Team(3, Ops.LOW)) == pytest.approx(0.075)
    assert switching_margin(Team(50, Ops.HIGH)) == pytest.approx(0.012)
    assert switching_margin(Team(3, Ops.MEDIUM), in_fleet=True) == pytest.approx(0.025)
    sizes = [switching_margin(Team(n, Ops.MEDIUM)) for n in (1, 2, 4, 8, 20)]
    assert sizes == sorted(sizes, reverse=True)


def test_requests_to_resolve() -> None:
    # +4 pp +/- 2 pp against a 5 pp margin: 1 pp away, half width 2 -> 4x the requests
    assert requests_to_resolve(100, Interval(0.04, 0.02, 0.06), 0.05) == 400
    assert requests_to_resolve(100, Interval(0.08, 0.06, 0.10), 0.05) is None
    assert requests_to_resolve(100, Interval(0.01, 0.00, 0.02), 0.05) is None
