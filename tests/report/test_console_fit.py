"""Terminal text and tables that never break a value or a label in two."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from kvroute.report.console_fit import Parts, Prose, fit_columns, natural_width

VALUES = [
    "29.8 %",
    "58 min 57 s",
    "93.1 ms",
    "+4.6 pp",
    "p50 / p90 / max",
    "1.2 GiB",
    "352 tokens",
    "CPUs 0-1",
]
SENTENCE = (
    "Of all prompt tokens, 29.8 % are reused; the queue waits 58 min 57 s at p90 and "
    "93.1 ms at p50, engine hit +4.6 pp, p50 / p90 / max shown, 1.2 GiB pinned, the "
    "largest prefix 352 tokens long, on CPUs 0-1."
)


def lines(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text().splitlines()


def test_prose_wraps_at_spaces_but_never_inside_a_value() -> None:
    for width in range(20, 90):  # from the longest value plus the indent
        out = lines(Prose(SENTENCE, indent=2), width)
        assert all(len(line) <= width for line in out), (width, out)
        joined = "\n".join(out)
        for value in VALUES:
            assert value in joined, (width, value, out)  # whole, on one line
        assert " ".join(" ".join(out).split()) == SENTENCE


def test_parts_break_only_between_parts() -> None:
    parts = ["kvroute simulate trace.jsonl", "openai", "600 requests", "274k prompt tokens"]
    for width in range(30, 100):
        out = lines(Parts(parts), width)
        assert [p for line in out for p in line.strip().split(" · ")] == parts, (width, out)


def _table(columns: Sequence[int]) -> Table:
    headers = ["engine", "load", "TTFT p50", "TTFT p99", "E2E p99", "engine hit"]
    row = ["llamacpp", "rate=4/s", "58 min 57 s", "1 h 02 min", "2 h 03 min", "57.0 %"]
    t = Table(box=None, pad_edge=False)
    for i in columns:
        t.add_column(headers[i], no_wrap=True)
    t.add_row(*(row[i] for i in columns))
    return t


def test_fit_columns_leaves_whole_columns_out_and_keeps_the_essential_ones() -> None:
    full = natural_width(_table(range(6)))
    assert all(len(line) <= full for line in lines(_table(range(6)), full))
    assert len(lines(_table(range(6)), full)) == 2  # at its natural width: one line a row
    for width in (30, 45, 60, full):
        console = Console(width=width, file=io.StringIO(), record=True)
        table, dropped = fit_columns(console, _table, range(6), essential=2)
        console.print(table)
        text = console.export_text()
        assert "rate=4/s" in text  # the load always
        kept = 6 - len(dropped)
        assert dropped == list(range(kept, 6))
        assert all(v in text for v in ["58 min 57 s", "1 h 02 min", "2 h 03 min"][: kept - 2])
        assert "…" not in text and len(text.splitlines()) == 2  # header and row, nothing cut
    assert fit_columns(Console(width=full), _table, range(6), essential=2)[1] == []
