"""``kvroute engines up|down|status|logs``: real local engines as managed subprocesses.

Thin: parse options, call :mod:`kvroute.engines.local`, render with rich. Errors are
:class:`~kvroute.errors.KvrouteError` subclasses, turned into one line and an exit
code by the main command. Progress goes to stderr; URLs and YAML to stdout, so
``kvroute engines up ... > backends.yaml`` keeps only what a config needs.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import click
import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy
from kvroute.cli.console import make_console
from kvroute.engines.launch import SGLANG_EVICTION_POLICIES, CpuPlan, LaunchOptions, plan_cpus
from kvroute.engines.local import (
    EngineState,
    LocalEngines,
    StartProgress,
    available_cpus,
    tail_log,
)
from kvroute.engines.process import StopOutcome
from kvroute.engines.registry import make_adapter
from kvroute.engines.snippet import backends_yaml
from kvroute.engines.state import EngineRecord, StateDir, default_state_dir
from kvroute.report.fmt import plural

F = TypeVar("F", bound=Callable[..., object])

_STATE_STYLE = {
    EngineState.READY: "green",
    EngineState.STARTING: "yellow",
    EngineState.UNHEALTHY: "red",
    EngineState.STALE: "dim",
}


def _state_dir_option(func: F) -> F:
    option = click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Where records and logs live [default: $KVROUTE_STATE_DIR or <cache>/state].",
    )
    return option(func)


def _manager(state_dir: Path | None, client: httpx.AsyncClient) -> LocalEngines:
    return LocalEngines(StateDir(state_dir or default_state_dir()), client=client)


@click.group("engines")
def engines_group() -> None:
    """Start, inspect and stop real local engines (llama.cpp, vLLM-CPU, SGLang-CPU) on 127.0.0.1."""


@engines_group.command("up")
@click.option("--engine", required=True, help="llamacpp, vllm or sglang.")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Sequences each replica serves at once (llama.cpp slots, vLLM max-num-seqs, "
    "SGLang max-running-requests).",
)
@click.option(
    "--ctx",
    "ctx_tokens",
    type=click.IntRange(min=16),
    default=4096,
    show_default=True,
    help="Context tokens per sequence (llama.cpp gets -c = parallel × ctx).",
)
@click.option(
    "--port",
    "ports",
    type=click.IntRange(1, 65535),
    multiple=True,
    help="One per replica; default: free ports.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Compute threads per replica [default: CPUs ÷ replicas, at least 1].",
)
@click.option(
    "--model",
    "model_path",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="GGUF file (llamacpp) or HF directory (vllm, sglang) [default: the installed SmolLM2].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=None,
    help="Seconds to wait for readiness [default: 120 llamacpp, 600 vllm, 600 sglang].",
)
@click.option(
    "--eager/--compile",
    "enforce_eager",
    default=False,
    help="vLLM only: skip torch.compile (ready in ~30 s instead of ~2 min) [default: compile].",
)
@click.option(
    "--pool-tokens",
    "sglang_pool_tokens",
    type=click.IntRange(min=1),
    default=32768,
    show_default=True,
    help="SGLang only: KV pool size in tokens (--max-total-tokens).",
)
@click.option(
    "--page-size",
    "sglang_page_size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="SGLang only: tokens per KV page (1: token-level radix tree).",
)
@click.option(
    "--radix-eviction-policy",
    "sglang_eviction",
    type=click.Choice([p.value for p in SGLANG_EVICTION_POLICIES]),
    default=EvictionPolicy.LRU.value,
    show_default=True,
    help="SGLang only: the radix tree's eviction order.",
)
@click.option(
    "--schedule-policy",
    "sglang_schedule",
    type=click.Choice([p.value for p in SchedulePolicy]),
    default=SchedulePolicy.FCFS.value,
    show_default=True,
    help="SGLang only: the order waiting requests are started in.",
)
@_state_dir_option
def up_command(
    *,
    engine: str,
    replicas: int,
    parallel: int,
    ctx_tokens: int,
    ports: tuple[int, ...],
    threads: int | None,
    model_path: Path | None,
    timeout_s: float | None,
    enforce_eager: bool,
    sglang_pool_tokens: int,
    sglang_page_size: int,
    sglang_eviction: str,
    sglang_schedule: str,
    state_dir: Path | None,
) -> None:
    """Start engines, wait until each is healthy, print URLs and a backends snippet."""
    options = LaunchOptions(
        parallel=parallel,
        ctx_tokens=ctx_tokens,
        threads=threads,
        model_path=model_path,
        vllm_enforce_eager=enforce_eager,
        sglang_max_total_tokens=sglang_pool_tokens,
        sglang_page_size=sglang_page_size,
        sglang_eviction_policy=EvictionPolicy(sglang_eviction),
        sglang_schedule_policy=SchedulePolicy(sglang_schedule),
    )
    err = make_console(stderr=True)
    plan = plan_cpus(available_cpus(), replicas, threads)
    if plan.oversubscribed:
        err.print(f"[yellow]warning: {plan_line(plan)}[/]")
    else:
        err.print(f"starting {engine}: {plan_line(plan)}")

    async def run() -> list[EngineRecord]:
        async with httpx.AsyncClient() as client:
            manager = _manager(state_dir, client)
            start = functools.partial(
                manager.up,
                engine,
                replicas=replicas,
                options=options,
                ports=ports or None,
                ready_timeout_s=timeout_s,
                cpu_plan=plan,
            )
            if not err.is_terminal:
                # No live table off a terminal (CI logs, pipes): a line per change of
                # state, and one every 15 s while waiting, so a slow start is not silence.
                return await start(on_progress=_ProgressLines(err))
            with Live(console=err, transient=True, refresh_per_second=4) as live:

                def show(progress: Sequence[StartProgress]) -> None:
                    live.update(_progress_table(progress))

                return await start(on_progress=show)

    records = asyncio.run(run())
    err.print(f"[green]{plural(len(records), engine + ' replica')} ready[/green]")
    out = make_console(highlight=False, soft_wrap=True)
    for record in records:
        out.print(f"{record.name}  {record.base_url}  (pid {record.pid}, log {record.log_path})")
    out.print()
    out.print(backends_yaml(records), end="")


@engines_group.command("status")
@click.option("--engine", default=None, help="Only this engine.")
@_state_dir_option
def status_command(engine: str | None, state_dir: Path | None) -> None:
    """Show every recorded engine: health, load, uptime; stale records are marked."""

    async def run() -> Table:
        async with httpx.AsyncClient() as client:
            statuses = await _manager(state_dir, client).status(engine)
            table = Table("name", "url", "pid", "state", "running/waiting", "uptime")
            for status in statuses:
                record = status.record
                load = "-"
                if status.state is EngineState.READY:
                    adapter = make_adapter(record.engine, record.base_url, client=client)
                    now = await adapter.load()
                    load = f"{now.num_running}/{now.num_waiting}"
                style = _STATE_STYLE[status.state]
                table.add_row(
                    record.name,
                    record.base_url,
                    str(record.pid),
                    f"[{style}]{status.state.value}[/{style}]",
                    load,
                    _duration(status.uptime_s),
                )
            return table

    table = asyncio.run(run())
    console = make_console()
    if table.row_count == 0:
        console.print("no engines recorded")
    else:
        console.print(table)


@engines_group.command("down")
@click.option("--engine", default=None, help="Only this engine.")
@_state_dir_option
def down_command(engine: str | None, state_dir: Path | None) -> None:
    """Stop every recorded engine (whole process groups) and remove stale records."""

    async def run() -> list[tuple[EngineRecord, StopOutcome]]:
        async with httpx.AsyncClient() as client:
            results = await _manager(state_dir, client).down(engine)
            return [(r.record, r.outcome) for r in results]

    results = asyncio.run(run())
    console = make_console(highlight=False)
    if not results:
        console.print("no engines recorded")
    for record, outcome in results:
        what = {
            StopOutcome.STOPPED: "stopped",
            StopOutcome.ALREADY_GONE: "was not running; record removed",
            StopOutcome.NOT_OURS: "pid reused by another process; record removed, none signalled",
        }[outcome]
        console.print(f"{record.name} (pid {record.pid}): {what}")


@engines_group.command("logs")
@click.option("--engine", default=None, help="Only this engine.")
@click.option("--port", type=int, default=None, help="Only the replica on this port.")
@click.option("-n", "--lines", type=click.IntRange(min=1), default=50, show_default=True)
@_state_dir_option
def logs_command(engine: str | None, port: int | None, lines: int, state_dir: Path | None) -> None:
    """Print the end of each recorded engine's log file."""
    records = [
        r
        for r in StateDir(state_dir or default_state_dir()).records()
        if (engine is None or r.engine == engine) and (port is None or r.port == port)
    ]
    console = make_console(highlight=False)
    if not records:
        console.print("no engines recorded")
    for record in records:
        console.rule(f"{record.name}  {record.log_path}")
        console.print(tail_log(Path(record.log_path), lines), markup=False)


def plan_line(plan: CpuPlan) -> str:
    """``3 replicas × 1 thread on 2 CPUs``, and what oversubscribing them costs."""
    n = len(plan.cpu_sets)
    cpus = plural(plan.num_cpus, "CPU")
    line = f"{plural(n, 'replica')} × {plural(plan.threads, 'thread')} on {cpus}"
    if plan.oversubscribed:
        line += (
            f": {plan.threads * n} compute threads on {cpus} oversubscribe them, and the "
            "replicas slow each other down (fewer --replicas or --threads)"
        )
    return line


class _ProgressLines:
    """Start-up progress as plain lines: each replica's state when it changes, and a
    reminder every ``every_s`` while some replica is still starting."""

    def __init__(self, console: Console, every_s: float = 15.0) -> None:
        self._console = console
        self._every_s = every_s
        self._states: dict[str, str] = {}
        self._last_s = 0.0

    def __call__(self, progress: Sequence[StartProgress]) -> None:
        now = max((p.elapsed_s for p in progress), default=0.0)
        changed = [p for p in progress if self._states.get(p.record.name) != p.health.state.value]
        due = now - self._last_s >= self._every_s
        for item in progress if due and not changed else changed:
            self._states[item.record.name] = item.health.state.value
            self._console.print(
                f"{item.record.name}: {item.health.state.value} after {_duration(item.elapsed_s)}",
                highlight=False,
            )
        if changed or due:
            self._last_s = now


def _progress_table(progress: Sequence[StartProgress]) -> Table:
    table = Table("replica", "state", "waited", box=None)
    for item in progress:
        style = "green" if item.health.is_ready else "yellow"
        table.add_row(
            item.record.name,
            f"[{style}]{item.health.state.value}[/{style}]",
            _duration(item.elapsed_s),
        )
    return table


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
