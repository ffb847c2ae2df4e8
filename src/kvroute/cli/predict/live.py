"""Serve a synthetic load on a live engine, through kvroute's bench client, and read back
per-request TTFT and TPOT: the measuring half of ``calibrate`` and ``predict --validate``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.bench.metrics import e2e_s, stat, tpot_s, ttft_s
from kvroute.bench.record import RequestRecord
from kvroute.bench.result import WorkloadInfo
from kvroute.bench.run_options import Endpoint, RunOptions
from kvroute.bench.runner import run_bench
from kvroute.bench.schedule import ClosedLoop, OpenLoop
from kvroute.bench.scrape import CacheMode
from kvroute.bench.workloads.base import Api, BenchRequest
from kvroute.errors import EngineError
from kvroute.predict.workload import FixedWorkload

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Measured:
    """Per request, in the order sent (NaN where a request failed)."""

    ttft_s: FloatArray
    tpot_s: FloatArray
    e2e_s: FloatArray
    cached_tokens: list[int | None]
    num_failed: int


def serve_fixed(
    url: str,
    engine: str,
    workload: FixedWorkload,
    *,
    concurrency: int | None = None,
    rate_per_s: float | None = None,
    seed: int = 0,
    model: str | None = None,
) -> Measured:
    """Send ``workload`` (token-id prompts on ``/v1/completions``, ``ignore_eos`` so every
    answer has ``osl`` tokens, greedy) to ``url`` under a closed loop or Poisson arrivals,
    the engine's cache reset first. Raises ``EngineError`` when nothing succeeds."""
    prompts = workload.token_prompts(np.random.default_rng(seed))
    requests = [
        BenchRequest(
            index=i,
            workload="fixed",
            api=Api.COMPLETIONS,
            body={"prompt": ids},
            prompt_tokens=len(ids),
            max_tokens=workload.osl,
        )
        for i, ids in enumerate(prompts)
    ]
    load = ClosedLoop(concurrency) if concurrency is not None else OpenLoop(rate_per_s or 1.0)
    info = WorkloadInfo(
        name="fixed",
        params={
            "isl": str(workload.isl),
            "osl": str(workload.osl),
            "prefix": str(workload.prefix_tokens),
        },
        seed=seed,
        num_requests=len(requests),
        tokenizer="token ids",
        prompt_tokens=stat(float(r.prompt_tokens) for r in requests),
        max_tokens=stat(float(r.max_tokens) for r in requests),
        num_sessions=0,
        num_structured=0,
        ideal_overlap=None,
    )
    options = RunOptions(loads=(load,), cache=CacheMode.COLD, ignore_eos=True, temperature=0.0)
    result = run_bench(requests, info, [Endpoint("live", url, engine, model)], options)
    records = sorted(result.runs[0].requests, key=lambda r: r.index)

    def col(fn: Callable[[RequestRecord], float | None]) -> FloatArray:
        values = [fn(r) for r in records]
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)

    ttft = col(ttft_s)
    if not np.isfinite(ttft).any():
        first_error = next((r.error_detail for r in records if r.error_detail), "no answer")
        raise EngineError(f"{url}: no request succeeded ({first_error})")
    return Measured(
        ttft_s=ttft,
        tpot_s=col(tpot_s),
        e2e_s=col(e2e_s),
        cached_tokens=[r.cached_tokens for r in records],
        num_failed=int((~np.isfinite(ttft)).sum()),
    )
