"""The reuse breakdown: a table per dimension with more than one group, each group's own figures."""

from __future__ import annotations

from rich.console import Console

from kvroute.analyze.result import AnalysisResult
from kvroute.report.analyze.breakdown import breakdown_section, print_breakdown
from kvroute.report.page.html import Paragraph, Table


def test_two_models_get_a_table_and_one_user_none(analysis: AnalysisResult) -> None:
    assert analysis.breakdown is not None
    section = breakdown_section(analysis.breakdown)
    split = section.blocks[0]
    assert isinstance(split, Paragraph)
    # every session is one request: all reuse is across requests
    assert "0.0 % are reused within a conversation" in split.text
    assert "and 71.2 % across requests" in split.text
    titles = [b.text for b in section.blocks if isinstance(b, Paragraph)][1:]
    assert titles == ["By model (2 groups):"]  # no user given: one group, no table
    (table,) = [b for b in section.blocks if isinstance(b, Table)]
    # model-a's first request is the trace's first (nothing to reuse): 9 x 96 of 10 x 128
    # tokens; model-b reuses the 96 shared tokens on all 10 of its requests
    assert [list(r) for r in table.rows] == [
        ["model-a", "10", "50.0 %", "67.5 %", "0.0 %"],
        ["model-b", "10", "50.0 %", "75.0 %", "0.0 %"],
    ]


def test_the_terminal_prints_the_same_table(analysis: AnalysisResult) -> None:
    assert analysis.breakdown is not None
    console = Console(record=True, width=160)
    print_breakdown(analysis.breakdown, console)
    out = console.export_text()
    assert "Reuse by model (2 groups)" in out
    rows = [line.replace("│", " ").split() for line in out.splitlines() if "model-" in line]
    assert [" ".join(r) for r in rows] == [
        "model-a 10 50.0 % 67.5 % 0.0 %",
        "model-b 10 50.0 % 75.0 % 0.0 %",
    ]
