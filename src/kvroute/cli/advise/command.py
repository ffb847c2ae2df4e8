"""``kvroute advise``: an engine per workload class, its flags, a gateway config and alerts.

Reads options (every one checked before the trace is read), sizes the pool, reads and
labels the trace (the gateway's classes, before tokenizing), runs
:func:`kvroute.advise.run.advise` on the chosen evidence (registry.py), renders every output in
memory, checks the gateway config as ``kvroute serve --check`` would, and only then
writes ``--out DIR`` whole (:mod:`kvroute.cli.advise.output`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from kvroute.advise.alerts import alerts_yaml
from kvroute.advise.current import engine_by_class, single_engine
from kvroute.advise.gateway_config import (
    engine_replicas,
    gateway_engines,
    gateway_yaml,
    replica_urls,
)
from kvroute.advise.hardware import CPU, resolve_hardware
from kvroute.advise.latency_evidence import METRIC as LATENCY_METRIC
from kvroute.advise.launch_scripts import launch_scripts
from kvroute.advise.options import (
    ENGINES,
    AdviseOptions,
    Exposure,
    Ops,
    Team,
    parse_engine_list,
    parse_slo,
)
from kvroute.advise.registry import EvidenceSetup, choose_evidence, evidence_sources
from kvroute.advise.result import Advice
from kvroute.advise.rules import load_advisories
from kvroute.advise.run import ROUTE_PER_CLASS_TEAM, TraceSourceInfo, advise
from kvroute.advise.workload import classify_request
from kvroute.cache.capacity import resolve_model
from kvroute.cli.advise.output import check_out_dir, write_out_dir
from kvroute.cli.console import make_console
from kvroute.cli.files import parse_pairs
from kvroute.cli.simulate.output import json_bytes
from kvroute.cli.simulate.trace import load_trace
from kvroute.cli.trace_input import open_trace
from kvroute.errors import UsageError
from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.config.gateway import load_config, parse_config
from kvroute.gateway.types import WorkloadClass
from kvroute.predict.calibration import Calibration, load_calibration
from kvroute.report.page.html import render_page
from kvroute.trace.records import Request


@click.command("advise")
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True))
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory for every output (created; must be new or empty).",
)
@click.option("--force", is_flag=True, help="Replace the contents of a non-empty --out.")
@click.option(
    "--model",
    default="llama-3.1-8b",
    show_default=True,
    help="Model preset, HF config.json or .gguf (sizes the KV pool).",
)
@click.option(
    "--gpu",
    default="h100-80gb",
    show_default=True,
    help="GPU preset, a memory size like 80GiB, or 'cpu' (this testbed).",
)
@click.option("--num-gpus", type=click.IntRange(1), default=1, show_default=True)
@click.option(
    "--gpu-util",
    type=float,
    default=0.9,
    show_default=True,
    help="Share of GPU memory for the engine.",
)
@click.option(
    "--kv-dtype",
    default="auto",
    show_default=True,
    help="KV cache dtype of the pool (auto, fp8, ...).",
)
@click.option(
    "--cpu-kv-gib",
    type=float,
    default=1.0,
    show_default=True,
    help="With --gpu cpu: the KV pool in GiB (VLLM_CPU_KVCACHE_SPACE).",
)
@click.option(
    "--team-size",
    type=int,
    default=3,
    show_default=True,
    help=f"People who run the deployment; from {ROUTE_PER_CLASS_TEAM}, one engine per class.",
)
@click.option(
    "--ops",
    type=click.Choice([o.value for o in Ops]),
    default="medium",
    show_default=True,
    help="Tolerance for operations work.",
)
@click.option(
    "--exposure",
    type=click.Choice([e.value for e in Exposure]),
    default="internal",
    show_default=True,
)
@click.option(
    "--slo",
    default=None,
    help="Objectives, e.g. ttft_p99=1s,tpot_p99=60ms: scores engines on predicted latency.",
)
@click.option(
    "--engines",
    "engines",
    default=",".join(ENGINES),
    show_default=True,
    help="Engines to consider.",
)
@click.option(
    "--calibration",
    type=click.Path(path_type=Path),
    default=None,
    help="A kvroute calibrate file, or a directory of them (one per engine), for latency evidence.",
)
@click.option(
    "--current",
    "current_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The gateway.yaml that runs today: the advice becomes a diff against it.",
)
@click.option(
    "--url",
    "urls",
    multiple=True,
    help="ENGINE=URL of a running engine for gateway.yaml (default 127.0.0.1:8081/8082/8083); "
    "repeat an engine for its replicas (more replicas: ports 10 apart above the first).",
)
@click.option(
    "--evidence",
    "evidence_name",
    default=None,
    help="What engines are scored on: latency (SLO attainment from kvroute predict; the "
    "default with --slo) or hits (prefill saved, from the cache models; the default without).",
)
@click.option(
    "--min-requests",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Fewer requests in the trace and advise refuses to decide.",
)
@click.option("--format", "format_name", default=None, help="Force a trace reader.")
@click.option(
    "--tokenizer",
    default=None,
    help="A .gguf or HF tokenizer directory (default the SmolLM2 GGUF).",
)
@click.option("--workers", type=click.IntRange(1), default=None, help="Tokenizer processes.")
@click.option("--skip-invalid", is_flag=True, help="Count and skip malformed records.")
@click.option("-q", "--quiet", is_flag=True)
def advise_cmd(
    trace: Path,
    out: Path,
    force: bool,
    model: str,
    gpu: str,
    num_gpus: int,
    gpu_util: float,
    kv_dtype: str,
    cpu_kv_gib: float,
    team_size: int,
    ops: str,
    exposure: str,
    slo: str | None,
    engines: str,
    calibration: Path | None,
    current_path: Path | None,
    urls: tuple[str, ...],
    evidence_name: str | None,
    min_requests: int,
    format_name: str | None,
    tokenizer: str | None,
    workers: int | None,
    skip_invalid: bool,
    quiet: bool,
) -> None:
    """Advise an engine per workload class of TRACE, with flags and a gateway config.

    \b
    Classes are the gateway's (structured, agent, tools, long_prefix, chat,
    completion). Per class: feasibility (the model fits, llama.cpp's slots, exposure
    rules), then each engine's score (with --slo: the share of requests whose
    predicted TTFT/TPOT meet it; without: prefill saved at the KV pool), compared with the
    incumbent (vLLM, or what --current runs) on the same requests: a move must clear a
    margin that grows as the team shrinks and ops tolerance falls, on the interval's
    lower bound. Then capacity: the pool for 90 % of the ideal, replicas with
    cache-aware vs round-robin routing, fp8 KV.

    \b
    Writes to --out DIR: advice.json (docs/advise.md), report.html, gateway.yaml
    (passes `kvroute serve --check`), launch-<engine>.sh, alerts.yaml (Prometheus).
    """
    options = AdviseOptions(
        team=Team(team_size, Ops(ops)),
        exposure=Exposure(exposure),
        slo=parse_slo(slo) if slo else (),
        engines=parse_engine_list(engines),
        min_trace_requests=min_requests,
        min_class_requests=min(50, min_requests),
    )
    url_map = parse_urls(urls)
    setup = EvidenceSetup(
        options.slo, load_calibrations(calibration) if calibration is not None else {}
    )
    if evidence_name is not None:
        evidence_sources().get(evidence_name)(setup)  # a bad name or no --slo: before the trace
    check_out_dir(out, force=force)
    hardware = resolve_hardware(
        resolve_model(model),
        gpu,
        num_gpus=num_gpus,
        utilization=gpu_util,
        kv_dtype=kv_dtype,
        cpu_kv_gib=cpu_kv_gib,
    )
    current_config = load_config(current_path) if current_path is not None else None
    current = engine_by_class(current_config) if current_config is not None else {}
    if current and team_size < ROUTE_PER_CLASS_TEAM:
        now = single_engine(current)
        current = {"all": now} if now else {}
    console = make_console(stderr=False, quiet=quiet)
    labels: list[WorkloadClass] = []
    classify_options = current_config.classify if current_config is not None else ClassifyOptions()

    def label(request: Request) -> None:
        labels.append(classify_request(request, classify_options))

    with open_trace(trace) as given:
        requests, source = load_trace(
            given, format_name, tokenizer, workers, skip_invalid, console, tap=label
        )
    choice = choose_evidence(evidence_name, setup, requests, hardware)
    with console.status("advising: replaying each class on each engine"):
        advice = advise(
            requests,
            labels,
            TraceSourceInfo(source.path, source.format, source.tokenizer),
            hardware,
            options,
            choice.evidence,
            load_advisories(),
            current=current,
            evidence_fallback=choice.fallback,
        )
    if calibration is not None and choice.evidence.metric != LATENCY_METRIC:
        advice.notes.append(f"--calibration {calibration} is not used: the scores are cache hits")
    files = render_outputs(
        advice,
        url_map,
        exposed=options.exposure in (Exposure.INTERNET, Exposure.MULTI_TENANT),
        cpu=gpu.strip().lower() == CPU,
        # absolute: the gateway runs from elsewhere
        tokenizer=str(Path(tokenizer).expanduser().resolve()) if tokenizer else None,
    )
    write_out_dir(out, files, frozenset(n for n in files if n.endswith(".sh")))
    if not quiet:
        # soft_wrap: one line per decision, whatever the terminal width (grep-able)
        console.print(advice.headline, soft_wrap=True, markup=False)
        for d in advice.classes:
            console.print(f"  {d.headline}", soft_wrap=True, markup=False)
        console.print(f"wrote {out}/: {', '.join(sorted(files))}")


def parse_urls(values: tuple[str, ...]) -> dict[str, list[str]]:
    """``--url ENGINE=URL`` (repeatable): engine -> its replicas' URLs, in order."""
    out: dict[str, list[str]] = {}
    for v in values:
        ((engine, url),) = parse_pairs((v,), "--url").items()
        if engine not in ENGINES:
            raise UsageError(f"--url: unknown engine '{engine}' (valid: {', '.join(ENGINES)})")
        out.setdefault(engine, []).append(url)
    return out


def load_calibrations(path: Path) -> dict[str, Calibration]:
    """Engine -> calibration from a kvroute calibrate file, or every ``*.json`` of a
    directory; ``InputError`` for an unreadable one, ``UsageError`` for two of one engine."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise UsageError(f"--calibration {path}: no *.json calibration files in it")
    out: dict[str, Calibration] = {}
    for f in files:
        cal = load_calibration(f)
        if cal.engine in out:
            raise UsageError(f"--calibration {path}: two calibrations for {cal.engine} ({f.name})")
        out[cal.engine] = cal
    return out


def render_outputs(
    advice: Advice,
    urls: dict[str, list[str]],
    *,
    exposed: bool,
    cpu: bool,
    tokenizer: str | None = None,
) -> dict[str, bytes]:
    """Every file of --out, in memory; the gateway config is parsed as `serve` parses it."""
    from kvroute.report.advise.page import advise_page

    replicas = engine_replicas(advice)
    all_urls = {
        e: replica_urls(e, replicas.get(e, 1), urls.get(e, [])) for e in gateway_engines(advice)
    }
    gateway = gateway_yaml(advice, all_urls, exposed=exposed, tokenizer=tokenizer)
    parse_config(gateway, "gateway.yaml", env={})  # a config serve would refuse is a bug here
    files: dict[str, bytes] = {
        "advice.json": json_bytes(advice) + b"\n",
        "gateway.yaml": gateway.encode(),
        "alerts.yaml": alerts_yaml(advice).encode(),
    }
    scripts = launch_scripts(
        advice.flags, all_urls, cpu=cpu, gpus_per_replica=advice.hardware.num_gpus
    )
    for name, text in scripts.items():
        files[name] = text.encode()
    files["report.html"] = render_page(advise_page(advice, datetime.now(UTC), gateway)).encode()
    return files
