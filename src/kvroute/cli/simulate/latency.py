"""``kvroute simulate --latency``: each engine's predicted TTFT, TPOT and E2E next to the
hit table, from :func:`kvroute.predict.predict.predict` (the same replay and step-time
model as ``kvroute predict``; one mechanism).

The trace is replayed at its own arrival times (or ``--rate``), on the GPU and model that
size simulate's pool (default: llama-3.1-8b on one h100-80gb), with the shipped GPU-run fit
for each engine (or a widened prior, which the table says).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from kvroute.cache.capacity import resolve_gpu, resolve_model
from kvroute.cache.registry import EngineSettings
from kvroute.cli.simulate.capacity import DEFAULT_GPU, DEFAULT_MODEL
from kvroute.predict.engine import EngineFlags
from kvroute.predict.export import prediction_json
from kvroute.predict.predict import Load, predict
from kvroute.predict.result import Prediction
from kvroute.trace.records import Request

LATENCY_SAMPLES = 10
"""Coefficient draws per engine (fewer than ``predict``'s default: three engines run)."""


def latency_predictions(
    requests: Sequence[Request],
    engines: Sequence[str],
    *,
    model: str | None,
    gpu: str | None,
    num_gpus: int,
    kv_dtype: str,
    capacity_tokens: int | None,
    settings: EngineSettings,
    rate_per_s: float | None,
    seed: int,
) -> list[Prediction]:
    """One prediction per engine, in ``engines`` order."""
    gpu_spec = resolve_gpu(gpu or DEFAULT_GPU)
    shape = resolve_model(model or DEFAULT_MODEL)
    flags = EngineFlags(cache=settings)
    return [
        predict(
            requests,
            engine=name,
            gpu=gpu_spec,
            model=shape,
            load=Load(rate_per_s=rate_per_s),
            num_gpus=num_gpus,
            kv_dtype=kv_dtype,
            engine_flags=flags,
            capacity_tokens=capacity_tokens,
            num_samples=LATENCY_SAMPLES,
            seed=seed,
        )
        for name in engines
    ]


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1e3:,.1f}"


def render_latency(preds: Sequence[Prediction], console: Console) -> None:
    """The latency table, saturation verdicts first."""
    if not preds:
        return
    p0 = preds[0]
    for p in preds:
        style = "bold red" if p.saturation.saturated else "green"
        console.print(f"[{style}]{p.engine}: {p.saturation.verdict}[/]")
    table = Table(
        title=(f"predicted latency (ms), {p0.model} on {p0.num_gpus} x {p0.hardware}, {p0.load}")
    )
    for col in ("engine", "hit", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p50"):
        table.add_column(col, justify="right" if col != "engine" else "left")
    table.add_column("E2E p99", justify="right")
    table.add_column("fit")
    for p in preds:
        table.add_row(
            p.engine,
            f"{p.hit_ratio:.1%}",
            _ms(p.ttft.p50.value),
            _ms(p.ttft.p99.value),
            _ms(p.tpot.p50.value),
            _ms(p.tpot.p99.value),
            _ms(p.e2e.p50.value),
            _ms(p.e2e.p99.value),
            p.calibration_source + (" (wide intervals)" if p.uses_prior else ""),
        )
    console.print(table)
    console.print(
        "[dim]95 % intervals, the TTFT split and per-request values: `kvroute predict` "
        "or --json[/dim]"
    )


def latency_json(preds: Sequence[Prediction]) -> list[dict[str, Any]]:
    """The ``latency`` member of simulate's JSON: ``kvroute predict``'s document per engine,
    without the per-request columns."""
    return [prediction_json(p, per_request=False) for p in preds]
