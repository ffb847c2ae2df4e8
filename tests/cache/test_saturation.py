"""A saturated engine is its own verdict, with the rate it sustains; one that keeps up is not."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import numpy as np
from rich.console import Console

from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.replay.timing import TimingOptions
from kvroute.cache.result import SimulationResult
from kvroute.cache.saturation import judge_saturation
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate
from kvroute.report.page.html import render_page
from kvroute.report.simulate.console import render_console
from kvroute.report.simulate.page import simulation_page
from kvroute.trace.records import Request, TokenPrompt


def _trace(n: int, gap_s: float, run_s: float) -> list[Request]:
    rng = np.random.default_rng(0)
    return [
        Request(
            prompt=TokenPrompt(rng.integers(0, 500, size=64, dtype=np.uint32)),
            arrival_s=i * gap_s,
            end_s=i * gap_s + run_s,
            output_len=8,
            model="SmolLM2-135M-Instruct",
        )
        for i in range(n)
    ]


def _simulate(gap_s: float, run_s: float) -> SimulationResult:
    return simulate(
        _trace(200, gap_s, run_s),
        capacity_from_tokens(1 << 20),
        TraceSource("t.jsonl", "openai", "SmolLM2-135M-Instruct"),
        options=SimulateOptions(engines=("llamacpp", "sglang"), timing=TimingOptions()),
    )


def test_a_queue_that_grows_for_the_whole_trace_is_saturated_at_the_rate_served() -> None:
    # 4 slots, 10 s per request: 0.4 req/s served while 2 req/s arrive.
    result = _simulate(gap_s=0.5, run_s=10.0)
    llama = next(e for e in result.engines if e.engine == "llamacpp")
    assert llama.saturation is not None and llama.saturation.saturated
    assert abs(llama.saturation.offered_rate_per_s - 2.0) < 1e-9
    assert abs(llama.saturation.sustained_rate_per_s - 0.4) < 0.01
    out = io.StringIO()
    render_console(result, Console(file=out, width=300))
    text = out.getvalue()
    assert (
        "llamacpp is saturated: requests arrive at 2 req/s and it sustains about 0.4 req/s" in text
    )
    assert "4 slots: llama-server's default --parallel" in text
    page = render_page(simulation_page(result, datetime.now(UTC)))
    assert "llamacpp is saturated" in page


def test_an_engine_that_keeps_up_is_not_saturated() -> None:
    result = _simulate(gap_s=5.0, run_s=10.0)  # 2 running at a time, 4 slots
    for run in result.engines:
        assert run.saturation is not None and not run.saturation.saturated
    out = io.StringIO()
    render_console(result, Console(file=out, width=300))
    assert "saturated" not in out.getvalue()


def test_too_few_requests_or_no_arrival_span_are_not_judged() -> None:
    nine = np.arange(9, dtype=np.float64)
    assert judge_saturation(nine, np.zeros(9), nine + 1) is None
    same = np.zeros(20)
    assert judge_saturation(same, np.zeros(20), same + 1) is None
