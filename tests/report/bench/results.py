"""Hand-built bench results for the report tests: two endpoints at two loads each."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from kvroute.bench.metrics import Slo, stat, summarize
from kvroute.bench.record import RequestRecord
from kvroute.bench.result import SCHEMA, BenchResult, EndpointInfo, LoadInfo, Run, WorkloadInfo

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def run(name: str, step: int, rate: float, ttft: float, cached: int) -> Run:
    records = [
        RequestRecord(
            index=i,
            scheduled_s=i / rate,
            sent_s=i / rate,
            first_byte_s=i / rate + ttft / 2,
            first_token_s=i / rate + ttft + 0.01 * i,
            end_s=i / rate + ttft + 0.5,
            chunk_times_s=[i / rate + ttft + 0.01 * i + 0.05 * k for k in range(5)],
            completion_tokens=5,
            prompt_tokens=100,
            cached_tokens=cached if i % 2 else 0,
        )
        for i in range(20)
    ]
    summary = summarize(records, slo=Slo(ttft_s=0.3))
    return Run(
        EndpointInfo(name, "http://127.0.0.1:1", "llamacpp", "m", "cold", []),
        step,
        0,
        LoadInfo("open", f"rate={rate:g}/s", rate_per_s=rate),
        0.0,
        summary,
        records,
    )


def result(ttft: float) -> BenchResult:
    runs = [
        run(n, s, r, ttft * (1 + s), c)
        for n, c in (("llama", 90), ("vllm", 40))
        for s, r in enumerate((2.0, 4.0))
    ]
    info = WorkloadInfo(
        "rag", {"overlap": "0.6"}, 0, 20, "SmolLM2", stat([100.0]), stat([5.0]), 0, 0, 0.6
    )
    return BenchResult(SCHEMA, 0.0, "0.1.0", info, {}, "sequential", runs, 1.0)


def interrupted(r: BenchResult) -> BenchResult:
    """``r`` as Ctrl-C leaves it: its last run cut short."""
    return replace(r, runs=[*r.runs[:-1], replace(r.runs[-1], interrupted=True)], interrupted=True)
