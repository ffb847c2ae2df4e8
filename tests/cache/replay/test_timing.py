"""Arrivals, run times and output lengths for the replay."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.cache.replay.timing import ArrivalSource, TimingOptions, plan, service_s
from kvroute.errors import UsageError
from kvroute.trace.records import Request, TokenPrompt


def req(t: float | None = None, end: float | None = None, out: int | None = None) -> Request:
    return Request(
        prompt=TokenPrompt(np.arange(4, dtype=np.uint32)), arrival_s=t, end_s=end, output_len=out
    )


def test_trace_times_relative_and_run_times() -> None:
    s = plan([req(100.0, 101.5, 5), req(100.5, None, 7)], TimingOptions())
    assert s.source is ArrivalSource.TRACE
    assert s.arrival_s is not None and s.arrival_s.tolist() == [0.0, 0.5]
    assert s.trace_run_s[0] == 1.5 and np.isnan(s.trace_run_s[1])
    assert s.output_tokens == [5, 7]
    ignored = plan([req(100.0, 101.5, 5)], TimingOptions(use_trace_end_times=False))
    assert np.isnan(ignored.trace_run_s[0])


def test_sequential_and_seeded_poisson() -> None:
    assert plan([req(), req(1.0)], TimingOptions()).source is ArrivalSource.SEQUENTIAL
    a = plan([req()] * 5, TimingOptions(arrival_rate_per_s=2.0, seed=1))
    b = plan([req()] * 5, TimingOptions(arrival_rate_per_s=2.0, seed=1))
    assert a.source is ArrivalSource.POISSON and a.arrival_s is not None and b.arrival_s is not None
    assert a.arrival_s[0] == 0 and np.array_equal(a.arrival_s, b.arrival_s)


def test_unknown_outputs_drawn_from_known_or_default() -> None:
    s = plan([req(out=10), req(), req(out=30), req()], TimingOptions(seed=2))
    assert s.num_outputs_drawn == 2 and set(s.output_tokens) <= {10, 30}
    assert plan([req(), req()], TimingOptions(default_output_tokens=77)).output_tokens == [77, 77]


def test_service_model_and_validation() -> None:
    t = TimingOptions(prefill_tokens_per_s=1000, decode_tokens_per_s=10)
    assert service_s(500, 20, t) == pytest.approx(2.5)
    with pytest.raises(UsageError):
        TimingOptions(decode_tokens_per_s=0)
