"""Schedules: arrival processes, ramp-up, closed-loop think times, cancel shares."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.bench.schedule import (
    Arrival,
    CancelSpec,
    ClosedLoop,
    OpenLoop,
    TraceTimes,
    build_schedule,
    open_loop_offsets,
)
from kvroute.bench.workloads.base import Api, BenchRequest
from kvroute.errors import UsageError


def reqs(n: int, arrival: bool = False) -> list[BenchRequest]:
    return [
        BenchRequest(
            i, "t", Api.CHAT, {"messages": []}, 10, 5, arrival_s=i * 0.5 if arrival else None
        )
        for i in range(n)
    ]


def test_poisson_rate_and_exponential_gaps() -> None:
    off = open_loop_offsets(20_000, OpenLoop(50.0), np.random.default_rng(1))
    gaps = np.diff(off)
    assert off[0] == 0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("k", [0.25, 4.0])
def test_gamma_burstiness_sets_the_coefficient_of_variation(k: float) -> None:
    gaps = np.diff(
        open_loop_offsets(20_000, OpenLoop(10.0, Arrival.GAMMA, k), np.random.default_rng(2))
    )
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / k, rel=0.1)


def test_constant_and_deterministic() -> None:
    off = open_loop_offsets(5, OpenLoop(4.0, Arrival.CONSTANT), np.random.default_rng(0))
    assert off.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    a = open_loop_offsets(100, OpenLoop(4.0), np.random.default_rng(7))
    assert np.array_equal(a, open_loop_offsets(100, OpenLoop(4.0), np.random.default_rng(7)))


def test_ramp_up_follows_the_linear_rate() -> None:
    rate, ramp = 100.0, 10.0
    off = open_loop_offsets(
        3000, OpenLoop(rate, Arrival.CONSTANT, ramp_up_s=ramp), np.random.default_rng(0)
    )
    # Λ(t) = R t² / (2 T) during the ramp, R T / 2 + R (t − T) after.
    assert np.sum(off < 5.0) == pytest.approx(rate * 25 / 20, abs=2)
    assert np.sum(off < 10.0) == pytest.approx(rate * 10 / 2, abs=2)
    assert np.sum(off < 20.0) == pytest.approx(rate * 5 + rate * 10, abs=2)
    assert np.all(np.diff(off) >= 0)


def test_build_open_closed_and_trace_schedules() -> None:
    rng = np.random.default_rng(0)
    s = build_schedule(reqs(100), OpenLoop(20.0, Arrival.CONSTANT), rng)
    assert [x.request_index for x in s.slots] == list(range(100))
    assert s.scheduled_rate_per_s == pytest.approx(20.0)
    c = build_schedule(reqs(10), ClosedLoop(3, think_s=0.5), rng)
    assert (
        all(x.offset_s is None and x.think_s == 0.5 for x in c.slots)
        and c.scheduled_rate_per_s is None
    )
    e = build_schedule(reqs(2000), ClosedLoop(3, think_s=0.5, exponential_think=True), rng)
    assert np.mean([x.think_s for x in e.slots]) == pytest.approx(0.5, rel=0.1)
    t = build_schedule(reqs(4, arrival=True), TraceTimes(), rng)
    assert [x.offset_s for x in t.slots] == [0.0, 0.5, 1.0, 1.5]
    with pytest.raises(UsageError, match="arrival times"):
        build_schedule(reqs(2), TraceTimes(), rng)


def test_cancel_share_and_range() -> None:
    s = build_schedule(
        reqs(4000), ClosedLoop(1), np.random.default_rng(3), cancel=CancelSpec(0.25, 2, 5)
    )
    after = [x.cancel_after_chunks for x in s.slots if x.cancel_after_chunks is not None]
    assert len(after) / 4000 == pytest.approx(0.25, abs=0.03)
    assert set(after) == {2, 3, 4, 5}
