"""The bench terminal summary: a line a run with its load, interruptions first, columns that fit."""

from __future__ import annotations

import io

from rich.console import Console

from kvroute.bench.result import BenchResult
from kvroute.report.bench.console import render_result

from .results import interrupted, result


def test_console_summary_of_an_interrupted_result_says_so_first() -> None:
    def summary(r: BenchResult) -> str:
        console = Console(file=io.StringIO(), width=200, record=True)
        render_result(r, console)
        return console.export_text()

    text = summary(interrupted(result(0.2)))
    assert text.startswith("INTERRUPTED BY CTRL-C"), text
    assert "3 finished runs and 1 cut short" in text
    assert "rate=4/s (interrupted)" in text
    assert "nterrupt" not in summary(result(0.2)).lower()


def test_a_narrow_terminal_keeps_the_load_and_names_the_columns_left_out() -> None:
    def text(width: int, wide: bool) -> str:
        console = Console(file=io.StringIO(), width=width, record=True)
        render_result(result(0.2), console, wide=wide)
        return console.export_text()

    narrow = text(70, wide=False)
    rows = [line for line in narrow.splitlines() if line.startswith(("llama ", "vllm "))]
    assert len(rows) == 4 and all("rate=" in r for r in rows)  # one line a run, load shown
    assert {r.split()[1] for r in rows} == {"rate=2/s", "rate=4/s"}
    assert "left out to fit 70 columns:" in narrow and "--wide shows them" in narrow
    wide = text(70, wide=True)
    rows = [line for line in wide.splitlines() if line.startswith(("llama ", "vllm "))]
    assert len(rows) == 4 and max(len(r) for r in rows) > 70  # every column, whole
    assert "left out" not in wide
