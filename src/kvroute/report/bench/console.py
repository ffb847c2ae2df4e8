"""Terminal summary of a bench result and of a comparison."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from kvroute.bench.compare import Pair
from kvroute.bench.result import BenchResult, Run
from kvroute.report import fmt
from kvroute.report.bench.rows import (
    DIFF_HEADERS,
    RUN_HEADERS,
    diff_cells,
    endpoint_caveats,
    error_lines,
    run_row,
    shown_headers,
)
from kvroute.report.console_fit import Parts, fit_columns, left_out_note, print_wide

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
        "The benchmark was stopped before the end. It holds "
        f"{fmt.plural(len(result.runs) - num_cut, 'finished run')}{cut}; the steps, repeats and endpoints after it are missing "
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
        Parts(
            [
                f"[bold]kvroute bench[/] {w.name}",
                fmt.plural(w.num_requests, "request"),
                f"seed {w.seed}",
                f"prompt p50 {fmt.tokens(w.prompt_tokens.p50)} tokens",
                f"ideal overlap {fmt.percent(w.ideal_overlap)}"
                if w.ideal_overlap is not None
                else "",
                result.side_by_side,
            ]
        )
    )
    shown = set(shown_headers(result.runs))
    keep = [i for i, h in enumerate(RUN_HEADERS) if h in shown and (wide or i < 5 or h in _SHORT)]
    rows = [run_cells(run) for run in result.runs]

    def build(columns: Sequence[int]) -> Table:
        table = Table(box=None, pad_edge=False)
        for i in columns:
            # Never wrapped: a value cut in two ("1.23" over "s") reads as two rows.
            table.add_column(RUN_HEADERS[i], justify="left" if i < 3 else "right", no_wrap=True)
        for row in rows:
            table.add_row(*(row[i] for i in columns))
        return table

    if wide:
        print_wide(console, build(keep))
    else:
        # The first three name the run (endpoint, load, cache state): a sweep's rows would
        # look alike without the load.
        table, dropped = fit_columns(console, build, keep, essential=3)
        console.print(table)
        if dropped:
            console.print(left_out_note([RUN_HEADERS[i] for i in dropped], console.width))
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
        cells = [diff_cells(d) for d in pair.diffs if d.a is not None or d.b is not None]

        def build(columns: Sequence[int], cells: list[list[str]] = cells) -> Table:
            table = Table(box=None, pad_edge=False)
            for i in columns:
                table.add_column(
                    DIFF_HEADERS[i], justify="left" if i == 0 else "right", no_wrap=True
                )
            for row in cells:
                table.add_row(*(row[i] for i in columns))
            return table

        table, dropped = fit_columns(console, build, range(len(DIFF_HEADERS)), essential=4)
        console.print(table)
        if dropped:
            console.print(
                left_out_note([DIFF_HEADERS[i] for i in dropped], console.width, "COLUMNS=200")
            )
