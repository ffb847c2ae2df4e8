"""Commands' consoles: wide enough off a terminal, values whole, a closed pipe raised."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from kvroute.cli.console import PIPE_WIDTH, make_console


def test_a_command_console_prints_plain_strings_as_prose() -> None:
    buf = io.StringIO()
    console = make_console(file=buf, width=24)
    console.print("a queue that waits 58 min 57 s at p90")
    out = buf.getvalue().splitlines()
    assert len(out) > 1 and any("58 min 57 s" in line for line in out), out


def test_off_a_terminal_tables_get_the_pipe_width_unless_columns_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console(file=io.StringIO()).width == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "90")
    assert make_console(file=io.StringIO()).width == 90
    assert make_console(file=io.StringIO(), width=50).width == 50


def test_a_wide_table_piped_is_not_cut_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    buf = io.StringIO()
    table = Table()
    for i in range(10):
        table.add_column(f"column {i}")
    table.add_row(*[f"{i}.0 %" for i in range(10)])
    make_console(file=buf).print(table)
    assert "9.0 %" in buf.getvalue() and "…" not in buf.getvalue()


class _ClosedPipe(io.StringIO):
    def write(self, s: str) -> int:
        raise BrokenPipeError


def test_a_closed_pipe_is_raised_for_main_to_end_the_command() -> None:
    console = make_console(file=_ClosedPipe())
    with pytest.raises(BrokenPipeError):
        console.print("x")
