"""Terminal summary of a bench result and of a comparison."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvroute.bench.compare import Pair
from kvroute.bench.result import BenchResult
from kvroute.report import fmt
from kvroute.report.bench_rows import DIFF_HEADERS, RUN_HEADERS, diff_cells, error_lines, run_row

_SHORT = {
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "E2E p99",
    "req/s",
    "out tok/s",
    "rate achieved",
    "engine hit",
}


def render_result(result: BenchResult, console: Console, *, wide: bool = False) -> None:
    w = result.workload
    console.print(
        f"[bold]kvroute bench[/] {w.name} · {fmt.count(w.num_requests)} requests · seed {w.seed}"
        f" · prompt p50 {fmt.tokens(w.prompt_tokens.p50 or 0)} tokens"
        + (
            f" · ideal overlap {fmt.percent(w.ideal_overlap)}"
            if w.ideal_overlap is not None
            else ""
        )
        + f" · {result.side_by_side}"
    )
    keep = [i for i, h in enumerate(RUN_HEADERS) if wide or i < 5 or h in _SHORT]
    table = Table(box=None, pad_edge=False)
    for i in keep:
        table.add_column(RUN_HEADERS[i], justify="left" if i < 3 else "right")
    for run in result.runs:
        row = run_row(run)
        table.add_row(*(row[i] for i in keep))
    console.print(table)
    for run in result.runs:
        problems = error_lines(run)
        if problems:
            console.print(
                f"[yellow]{run.endpoint.name} · {run.load.label}:[/] " + ", ".join(problems)
            )
        for note in run.endpoint.notes:
            console.print(f"[dim]{run.endpoint.name}: {note}[/]")


def render_comparison(pairs: list[Pair], console: Console) -> None:
    if not pairs:
        console.print("[yellow]no runs to pair: the results share no endpoint and load[/]")
        return
    for pair in pairs:
        noise = (
            f"run-to-run spread over {pair.num_repeats_a} and {pair.num_repeats_b} repeats"
            if pair.noise == "repeats"
            else "bootstrap 95 % interval of the difference (one run each)"
        )
        console.print(
            f"[bold]A {pair.endpoint_a} vs B {pair.endpoint_b}[/] · {pair.load} · noise: {noise}"
        )
        table = Table(box=None, pad_edge=False)
        for i, h in enumerate(DIFF_HEADERS):
            table.add_column(h, justify="left" if i == 0 else "right")
        for d in pair.diffs:
            if d.a is None and d.b is None:
                continue
            table.add_row(*diff_cells(d))
        console.print(table)
