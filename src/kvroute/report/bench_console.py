"""Terminal summary of a bench result and of a comparison."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvroute.bench.compare import Pair
from kvroute.bench.result import BenchResult, Run
from kvroute.report import fmt
from kvroute.report.bench_rows import (
    DIFF_HEADERS,
    RUN_HEADERS,
    diff_cells,
    endpoint_caveats,
    error_lines,
    run_row,
    shown_headers,
)

_SHORT = {
    "unsent/cut",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "E2E p99",
    "req/s",
    "out tok/s",
    "rate achieved",
    "engine hit",
}


INTERRUPTED_TITLE = "Interrupted by Ctrl-C: a partial result"


def interrupted_text(result: BenchResult) -> str | None:
    """What a result stopped by Ctrl-C (``"interrupted": true``) holds, in a sentence;
    None for a complete result."""
    if not result.interrupted:
        return None
    num_cut = sum(1 for r in result.runs if r.interrupted)
    cut = (
        f" and {num_cut} cut short (marked interrupted: its rates and percentiles describe "
        "a partial run)"
        if num_cut
        else ""
    )
    return (
        f"The benchmark was stopped before the end. It holds {len(result.runs) - num_cut} "
        f"finished run(s){cut}; the steps, repeats and endpoints after it are missing "
        "(docs/bench.md, Results)."
    )


def run_cells(run: Run) -> list[str]:
    """:func:`run_row`, with the load of a run cut short by Ctrl-C marked."""
    row = run_row(run)
    if run.interrupted:
        row[1] += " (interrupted)"
    return row


def render_result(result: BenchResult, console: Console, *, wide: bool = False) -> None:
    w = result.workload
    note = interrupted_text(result)
    if note is not None:
        console.print(f"[bold red]{INTERRUPTED_TITLE.upper()}[/]: {note}")
    console.print(
        f"[bold]kvroute bench[/] {w.name} · {fmt.count(w.num_requests)} requests · seed {w.seed}"
        f" · prompt p50 {fmt.tokens(w.prompt_tokens.p50)} tokens"
        + (
            f" · ideal overlap {fmt.percent(w.ideal_overlap)}"
            if w.ideal_overlap is not None
            else ""
        )
        + f" · {result.side_by_side}"
    )
    shown = set(shown_headers(result.runs))
    keep = [i for i, h in enumerate(RUN_HEADERS) if h in shown and (wide or i < 5 or h in _SHORT)]
    table = Table(box=None, pad_edge=False)
    for i in keep:
        # The load names the sweep step: cut, two rows would look like one.
        table.add_column(RUN_HEADERS[i], justify="left" if i < 3 else "right", no_wrap=i < 3)
    for run in result.runs:
        row = run_cells(run)
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
    first = [r for r in result.runs if r.step == 0 and r.repeat == 0]
    for caveat in endpoint_caveats(first):
        console.print(f"[yellow]caveat: the endpoints did not run alike. {caveat}[/]")


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
