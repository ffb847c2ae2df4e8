"""``kvroute predict``: TTFT, TPOT, E2E and queue wait for one engine on a trace or a
synthetic load, with intervals. Parse, call :func:`kvroute.predict.predict.predict`, render.

Exit codes (as every command): 2 for bad options (unknown GPU, model or engine; a
calibration for another engine; a workload spec that does not parse), 3 for an
unreadable trace or calibration file.
"""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from kvroute.cache.capacity import parse_size, resolve_gpu, resolve_model
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.models.sglang import SglangConfig
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings
from kvroute.cli.console import make_console
from kvroute.cli.files import check_outputs, emit, emit_page
from kvroute.errors import UsageError
from kvroute.predict.calibration import load_calibration
from kvroute.predict.engine import ENGINES, EngineFlags
from kvroute.predict.export import prediction_json
from kvroute.predict.predict import DEFAULT_SAMPLES, Load, predict
from kvroute.predict.result import Estimate, Prediction
from kvroute.predict.schedulers import (
    LlamaCppSchedulerConfig,
    SchedulerSettings,
    SglangSchedulerConfig,
    VllmSchedulerConfig,
)
from kvroute.predict.validation import Check, compare
from kvroute.predict.workload import parse_workload
from kvroute.report import fmt
from kvroute.trace.records import Request


@click.command("predict")
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False), required=False)
@click.option(
    "--workload", "workload_spec", help="Synthetic load: fixed:isl=5000,osl=500[,n=200,prefix=0]."
)
@click.option("--concurrency", type=int, help="Closed loop of N clients.")
@click.option("--rate", "rate_per_s", type=float, help="Poisson arrivals at R requests/s.")
@click.option("--engine", "-e", required=True, type=click.Choice(ENGINES))
@click.option("--model", "-m", required=True, help="Model preset, config.json or .gguf.")
@click.option("--gpu", "-g", required=True, help="GPU preset (see presets.json).")
@click.option("--num-gpus", type=int, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--dtype", default="bf16", show_default=True, help="Weight precision.")
@click.option("--kv-dtype", default="auto", show_default=True)
@click.option(
    "--calibration", type=click.Path(path_type=Path, dir_okay=False), help="From kvroute calibrate."
)
@click.option("--capacity-tokens", help="KV pool in tokens (default: sized from the GPU).")
@click.option("--max-num-seqs", type=int, default=256, show_default=True, help="vLLM.")
@click.option("--max-num-batched-tokens", type=int, default=8192, show_default=True, help="vLLM.")
@click.option("--chunked-prefill-size", type=int, default=8192, show_default=True, help="SGLang.")
@click.option("--max-running-requests", type=int, help="SGLang.")
@click.option(
    "--parallel",
    "-np",
    "num_slots",
    type=int,
    default=4,
    show_default=True,
    help="llama.cpp slots.",
)
@click.option(
    "--batch-size", "n_batch", type=int, default=2048, show_default=True, help="llama.cpp."
)
@click.option(
    "--ubatch-size", "n_ubatch", type=int, default=512, show_default=True, help="llama.cpp."
)
@click.option(
    "--samples",
    type=int,
    default=DEFAULT_SAMPLES,
    show_default=True,
    help="Coefficient draws for the intervals.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--validate",
    "validate_url",
    help="Also serve the --workload on this live engine (URL) and compare.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write JSON ('-': stdout).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write an HTML report: verdict, percentiles, TTFT split, distributions ('-': stdout).",
)
def predict_cmd(
    trace: Path | None,
    workload_spec: str | None,
    concurrency: int | None,
    rate_per_s: float | None,
    engine: str,
    model: str,
    gpu: str,
    num_gpus: int,
    dtype: str,
    kv_dtype: str,
    calibration: Path | None,
    capacity_tokens: str | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked_prefill_size: int,
    max_running_requests: int | None,
    num_slots: int,
    n_batch: int,
    n_ubatch: int,
    samples: int,
    seed: int,
    validate_url: str | None,
    json_path: Path | None,
    html_path: Path | None,
) -> None:
    """Predict TTFT, TPOT, E2E and queue wait of ENGINE serving TRACE (or --workload)."""
    check_outputs(
        {"--json": json_path, "--html": html_path}, inputs=[trace] if trace is not None else []
    )
    if (trace is None) == (workload_spec is None):
        raise UsageError("give a TRACE or --workload, not both")
    load = Load(concurrency=concurrency, rate_per_s=rate_per_s)
    gpu_spec = resolve_gpu(gpu)
    shape = resolve_model(model)
    cal = load_calibration(calibration) if calibration is not None else None
    cap = parse_size(capacity_tokens, what="capacity") if capacity_tokens else None
    requests: list[Request]
    if validate_url is not None and workload_spec is None:
        raise UsageError("--validate needs a --workload (a trace's text cannot be resent as is)")
    workload = parse_workload(workload_spec) if workload_spec is not None else None
    if workload is not None:
        requests = workload.requests()
        if load.concurrency is None and load.rate_per_s is None:
            raise UsageError("a synthetic workload needs --concurrency N or --rate R")
    else:
        assert trace is not None
        from kvroute.cli.simulate.trace import load_trace

        requests, _ = load_trace(trace, None, None, None, False, make_console(stderr=True))
    flags = EngineFlags(
        cache=EngineSettings(
            vllm=VllmConfig(max_num_seqs=max_num_seqs),
            sglang=SglangConfig(max_running_requests=max_running_requests),
            llamacpp=LlamaCppConfig(num_slots=num_slots),
        ),
        scheduler=SchedulerSettings(
            vllm=VllmSchedulerConfig(max_num_batched_tokens=max_num_batched_tokens),
            sglang=SglangSchedulerConfig(chunked_prefill_size=chunked_prefill_size),
            llamacpp=LlamaCppSchedulerConfig(n_batch=n_batch, n_ubatch=n_ubatch),
        ),
    )
    result = predict(
        requests,
        engine=engine,
        gpu=gpu_spec,
        model=shape,
        load=load,
        num_gpus=num_gpus,
        dtype=dtype,
        kv_dtype=kv_dtype,
        engine_flags=flags,
        calibration=cal,
        capacity_tokens=cap,
        num_samples=samples,
        seed=seed,
    )
    checks: list[Check] = []
    if validate_url is not None and workload is not None:
        from kvroute.cli.predict.live import serve_fixed

        with make_console(stderr=True).status(f"serving the workload on {validate_url}"):
            got = serve_fixed(
                validate_url,
                engine,
                workload,
                concurrency=concurrency,
                rate_per_s=rate_per_s,
                seed=seed,
            )
        checks = compare(result, got.ttft_s, got.tpot_s, got.e2e_s)
    if html_path is not None:
        from datetime import UTC, datetime

        from kvroute.report.predict.page import prediction_page

        emit_page(html_path, prediction_page([result], datetime.now(UTC)))
    if json_path is not None:
        doc = prediction_json(result)
        if validate_url is not None:
            doc["validation"] = {"url": validate_url, "checks": [_check_json(c) for c in checks]}
        emit(json_path, orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        if str(json_path) == "-":
            return
    if html_path is not None and str(html_path) == "-":
        return
    render(result)
    if checks:
        render_checks(checks)


def _check_json(c: Check) -> dict[str, object]:
    return {
        "metric": c.metric,
        "predicted_s": c.predicted_s,
        "ci95_s": list(c.ci95_s),
        "measured_s": c.measured_s,
        "relative_error": c.relative_error,
        "inside_ci95": c.inside_ci95,
    }


def render_checks(checks: list[Check]) -> None:
    from rich.table import Table

    table = Table(title="predicted vs measured (ms)")
    for col in ("metric", "predicted", "95 % interval", "measured", "error", "inside"):
        table.add_column(col, justify="right")
    for c in checks:
        table.add_row(
            c.metric,
            f"{c.predicted_s * 1e3:,.1f}",
            f"{c.ci95_s[0] * 1e3:,.1f}-{c.ci95_s[1] * 1e3:,.1f}",
            f"{c.measured_s * 1e3:,.1f}",
            f"{c.relative_error:+.1%}",
            "yes" if c.inside_ci95 else "no",
        )
    make_console().print(table)


def _ms(e: Estimate) -> tuple[str, str, str]:
    """The value and its 80 % and 95 % intervals, in milliseconds."""
    return (
        f"{e.value * 1e3:,.1f}",
        f"{e.ci80.low * 1e3:,.1f}–{e.ci80.high * 1e3:,.1f}",
        f"{e.ci95.low * 1e3:,.1f}–{e.ci95.high * 1e3:,.1f}",
    )


def render(p: Prediction) -> None:
    from rich import box
    from rich.table import Table

    console = make_console()
    pool = "unbounded" if p.capacity_tokens is None else f"{fmt.capacity(p.capacity_tokens)} tokens"
    console.print(
        f"[bold]{p.engine}[/] on {p.num_gpus} x {p.hardware}, {p.model}: {p.load}; "
        f"KV pool {pool}; calibration: {p.calibration_source}"
    )
    # A row per metric and percentile: three "value [80 %] [95 %]" cells side by side
    # were too wide for a terminal and wrapped between their intervals.
    table = Table(title="predicted, milliseconds", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("metric", "", "value", "80 % interval", "95 % interval"):
        table.add_column(col, justify="left" if col in ("metric", "") else "right", no_wrap=True)
    for name, m in (("queue", p.queue), ("TTFT", p.ttft), ("TPOT", p.tpot), ("E2E", p.e2e)):
        for q, e in (("p50", m.p50), ("p90", m.p90), ("p99", m.p99)):
            table.add_row(name if q == "p50" else "", q, *_ms(e))
    console.print(table)
    s = p.ttft_split
    console.print(
        f"TTFT mean split: queue {s.queue_s * 1e3:,.1f} ms, uncached prefill "
        f"{s.uncached_prefill_s * 1e3:,.1f} ms, cached-context attention "
        f"{s.cached_attention_s * 1e3:,.1f} ms, overhead {s.overhead_s * 1e3:,.1f} ms"
    )
    console.print(f"hit ratio {fmt.percent(p.hit_ratio)}; rejected {fmt.count(p.num_rejected)}")
    style = "bold red" if p.saturation.saturated else "green"
    console.print(f"[{style}]{p.saturation.verdict}[/]")
    for note in p.notes:
        console.print(f"note: {note}")
