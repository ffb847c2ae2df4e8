"""``kvroute bench``: workload-shaped load tests against real endpoints, side by side."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from kvroute.cli.console import make_console
from kvroute.cli.files import STDOUT, check_outputs, emit, emit_page, parse_pairs
from kvroute.errors import EngineError, KvrouteError, UsageError
from kvroute.report.fmt import plural

if TYPE_CHECKING:
    from rich.console import Console

    from kvroute.bench.result import BenchResult
    from kvroute.bench.schedule import CancelSpec, Load

DEFAULT_JSON = Path("bench.json")


def _cancel(spec: str | None) -> CancelSpec | None:
    from kvroute.bench.schedule import CancelSpec

    if spec is None:
        return None
    share_s, _, rng_s = spec.partition(":")
    try:
        share = float(share_s)
        lo, hi = (int(x) for x in rng_s.split("-")) if rng_s else (1, 8)
    except ValueError:
        raise UsageError(f"bad --cancel {spec!r}", hint="SHARE[:MIN-MAX], e.g. 0.1:1-8") from None
    return CancelSpec(share, lo, hi)


def _loads(
    rate: str | None,
    concurrency: str | None,
    trace_times: bool,
    arrival: str,
    burstiness: float,
    ramp_up: float,
    think: float,
) -> tuple[Load, ...]:
    from kvroute.bench.schedule import Arrival, ClosedLoop, OpenLoop, TraceTimes, parse_sweep

    if sum((rate is not None, concurrency is not None, trace_times)) > 1:
        raise UsageError("give one of --rate, --concurrency, --trace-times")
    if trace_times:
        return (TraceTimes(),)
    if rate is not None:
        return tuple(OpenLoop(r, Arrival(arrival), burstiness, ramp_up) for r in parse_sweep(rate))
    values = parse_sweep(concurrency or "4")
    if any(v != int(v) for v in values):
        raise UsageError("--concurrency takes whole numbers")
    return tuple(ClosedLoop(int(v), think) for v in values)


@click.group("bench", invoke_without_command=True)
@click.option(
    "-e",
    "--endpoint",
    "endpoints",
    multiple=True,
    metavar="NAME=URL[,...]",
    help="An endpoint to benchmark: NAME=URL, then optionally ,engine=E (llamacpp, vllm or "
    "sglang: which cache counters to read), ,model=M (the model name to send), ,key=K (its API "
    "key), ,threads=N (its compute threads, recorded so unlike endpoints are flagged; engines "
    "`kvroute engines up` started are looked up). Repeat to compare endpoints side by side.",
)
@click.option(
    "-w",
    "--workload",
    default="mix",
    show_default=True,
    help="A registered workload (see `kvroute bench workloads`).",
)
@click.option(
    "-p", "--param", "params", multiple=True, help="Workload parameter name=value; repeatable."
)
@click.option("-n", "--num-requests", type=click.IntRange(min=1), default=100, show_default=True)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the workload and the schedule."
)
@click.option("--tokenizer", help="A .gguf or HF tokenizer directory (default: the SmolLM2 GGUF).")
@click.option("--rate", help="Open loop: requests/s, or a sweep: 5,10,20 / 1:64:x2 / 10:50:+10.")
@click.option("--concurrency", help="Closed loop: users, or a sweep (default 4).")
@click.option(
    "--trace-times", is_flag=True, help="Send at the workload's own arrival times (replay, synth)."
)
@click.option(
    "--arrival",
    type=click.Choice(["poisson", "gamma", "constant"]),
    default="poisson",
    show_default=True,
)
@click.option(
    "--burstiness",
    type=float,
    default=1.0,
    show_default=True,
    help="Gamma shape k (CV² = 1/k); with --arrival gamma.",
)
@click.option(
    "--ramp-up",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to ramp the rate up from 0.",
)
@click.option(
    "--think",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Closed loop think time, seconds.",
)
@click.option(
    "--cache",
    "cache_mode",
    type=click.Choice(["cold", "warm", "salted"]),
    default="cold",
    show_default=True,
    help="Cache before each run: reset, as left, or untouched with run-unique salted prompts.",
)
@click.option(
    "--concurrent-endpoints",
    is_flag=True,
    help="Run all endpoints at once instead of one after another.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.001),
    default=300.0,
    show_default=True,
    help="Per-request limit, seconds.",
)
@click.option(
    "--ttft-timeout",
    type=click.FloatRange(min=0.001),
    default=60.0,
    show_default=True,
    help="Limit to the first token, seconds.",
)
@click.option(
    "--max-duration",
    type=click.FloatRange(min=0.1),
    default=600.0,
    show_default=True,
    help="Bound on each run, seconds.",
)
@click.option(
    "--cancel",
    "cancel_spec",
    help="Abandon a share of requests mid-stream: SHARE[:MIN-MAX chunks].",
)
@click.option("--slo", help="Goodput objectives, e.g. ttft=500ms,tpot=50ms,e2e=10s.")
@click.option(
    "--ignore-eos", is_flag=True, help="Ask engines to generate max_tokens every time (ignore_eos)."
)
@click.option(
    "--temperature",
    type=click.FloatRange(min=0.0),
    help="Sampling temperature sent with every request (0: greedy, repeatable answers); "
    "default: each engine's own. A workload that sets one keeps it.",
)
@click.option("--no-stream", is_flag=True, help="Non-streaming requests (TTFT then equals E2E).")
@click.option(
    "--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Client processes."
)
@click.option(
    "--repeat",
    "repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs per step (for noise).",
)
@click.option(
    "--no-overlap-check", is_flag=True, help="Skip measuring the workload's ideal prefix overlap."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=DEFAULT_JSON,
    show_default=True,
    help="Where to write the result (schema kvroute.bench/1); '-' for stdout. The default "
    "file is never overwritten without --force.",
)
@click.option("--force", is_flag=True, help="Overwrite ./bench.json when it exists.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write an HTML report; '-' for stdout.",
)
@click.option("-q", "--quiet", is_flag=True)
@click.pass_context
def bench_group(
    ctx: click.Context,
    endpoints: tuple[str, ...],
    workload: str,
    params: tuple[str, ...],
    num_requests: int,
    seed: int,
    tokenizer: str | None,
    rate: str | None,
    concurrency: str | None,
    trace_times: bool,
    arrival: str,
    burstiness: float,
    ramp_up: float,
    think: float,
    cache_mode: str,
    concurrent_endpoints: bool,
    timeout: float,
    ttft_timeout: float,
    max_duration: float,
    cancel_spec: str | None,
    slo: str | None,
    ignore_eos: bool,
    temperature: float | None,
    no_stream: bool,
    workers: int,
    repeats: int,
    no_overlap_check: bool,
    json_path: Path,
    force: bool,
    html_path: Path | None,
    quiet: bool,
) -> None:
    """Benchmark ENDPOINTs with a workload shaped like real traffic.

    The same pre-generated requests and schedule go to every endpoint; each engine's
    own cache counters are read around every run. Figures are defined in docs/bench.md.

    \b
    Examples:
      kvroute bench -e llama=http://127.0.0.1:8080 -w rag --concurrency 4
      kvroute bench -e a=http://127.0.0.1:8080 -e b=http://127.0.0.1:8000 -w mix --rate 2,4,8 --html r.html
      kvroute bench compare a.json b.json
    """
    if ctx.invoked_subcommand is not None:
        return
    from kvroute.bench.export import analyze_workload
    from kvroute.bench.metrics import Slo
    from kvroute.bench.preflight import check_endpoints
    from kvroute.bench.result import result_bytes
    from kvroute.bench.run_options import (
        Endpoint,
        RunOptions,
        SideBySide,
        with_recorded_compute,
    )
    from kvroute.bench.runner import BenchInterrupted, run_bench, workload_info
    from kvroute.bench.scrape import CacheMode
    from kvroute.bench.workloads.registry import generate
    from kvroute.engines.state import StateDir, default_state_dir
    from kvroute.report.bench.console import render_result
    from kvroute.trace.tokenizer import load_tokenizer

    if not endpoints:
        raise UsageError(
            "no endpoint given", hint="pass -e name=http://127.0.0.1:8080 (repeat to compare)"
        )
    try:  # the threads and CPUs of engines `kvroute engines up` started
        records = StateDir(default_state_dir()).records()
    except EngineError:  # a broken record is `engines status`'s to report, not bench's
        records = []
    parsed = [with_recorded_compute(Endpoint.parse(e), records) for e in endpoints]
    check_outputs({"--json": json_path, "--html": html_path})
    if ctx.get_parameter_source("json_path") is ParameterSource.DEFAULT:
        refuse_default_overwrite(json_path, force)
    options = RunOptions(
        loads=_loads(rate, concurrency, trace_times, arrival, burstiness, ramp_up, think),
        cache=CacheMode(cache_mode),
        side_by_side=SideBySide.CONCURRENT if concurrent_endpoints else SideBySide.SEQUENTIAL,
        first_token_timeout_s=ttft_timeout,
        timeout_s=timeout,
        max_duration_s=max_duration,
        stream=not no_stream,
        ignore_eos=ignore_eos,
        temperature=temperature,
        workers=workers,
        slo=Slo.parse(slo) if slo else None,
        cancel=_cancel(cancel_spec),
        seed=seed,
        repeats=repeats,
    )
    console = make_console(stderr=True)
    tok = load_tokenizer(tokenizer)
    param_map = parse_pairs(params, "--param")
    requests = generate(workload, num_requests, tok, seed=seed, params=param_map)
    if not requests:
        raise UsageError(f"workload {workload} produced no request")
    check_endpoints(parsed)  # before the overlap check and the run, which take a while
    overlap = (
        None if no_overlap_check else analyze_workload(requests, tok, tokenizer).overlap.hit_ratio
    )
    info = workload_info(workload, param_map, seed, tok.name, requests, overlap)

    def progress(line: str) -> None:
        if not quiet:
            console.print(f"[dim]running {line}[/]")

    try:
        result = run_bench(requests, info, parsed, options, progress=progress)
    except BenchInterrupted as stop:
        result = stop.result  # written below like any result, then exit 130
    emit(json_path, result_bytes(result))
    if not quiet:
        render_result(result, console)
        if json_path != STDOUT:
            console.print(f"wrote {json_path}")
    if html_path is not None:
        from kvroute.report.bench.page import bench_page

        emit_page(html_path, bench_page(result, datetime.now(UTC)))
        if html_path != STDOUT and not quiet:
            console.print(f"wrote {html_path}")
    _after_writing(result, json_path, html_path, console)


def refuse_default_overwrite(path: Path, force: bool) -> None:
    """The default output is not a path the user chose: an earlier run's result there is
    theirs to keep, so it is replaced only when asked (--force) or another path is given."""
    if path.exists() and not force:
        raise UsageError(
            f"{path} exists (an earlier bench result); not overwriting it",
            hint=f"pass --json NEW.json to keep both, or --force to overwrite {path}",
        )


def _after_writing(
    result: BenchResult, json_path: Path, html_path: Path | None, console: Console
) -> None:
    """Once the outputs are written: warn of an older HTML report beside the JSON, and
    exit 130 for Ctrl-C or 1 when some run had no request served."""
    from kvroute.bench.result import unserved_line, unserved_runs

    beside = json_path.with_suffix(".html")
    if html_path is None and json_path.suffix == ".json" and beside.is_file():
        console.print(
            f"note: {beside} is from an earlier run, not this one (add --html {beside} "
            "to rewrite it with the JSON)"
        )
    if result.interrupted:
        num_cut = sum(1 for r in result.runs if r.interrupted)
        cut = f' and {num_cut} cut short, marked "interrupted": true' if num_cut else ""
        console.print(
            f"Ctrl-C: the result holds {plural(len(result.runs) - num_cut, 'finished run')}{cut} "
            "(docs/bench.md, Results)"
        )
        raise KeyboardInterrupt
    unserved = unserved_runs(result)
    if unserved:
        first = unserved_line(unserved[0])
        raise KvrouteError(
            first if len(unserved) == 1 else f"{len(unserved)} runs served no request; {first}",
            hint="its results were written all the same; check the endpoint and the "
            "requests' error_detail",
        )


def _add_tools() -> None:
    from kvroute.cli.bench.tools import compare_cmd, generate_cmd, report_cmd, workloads_cmd

    for cmd in (compare_cmd, workloads_cmd, generate_cmd, report_cmd):
        bench_group.add_command(cmd)


_add_tools()
