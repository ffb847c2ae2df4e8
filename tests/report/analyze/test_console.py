"""The analyze terminal summary: the trace's figures, its verdict last."""

from __future__ import annotations

from rich.console import Console

from kvroute.analyze.result import AnalysisResult
from kvroute.report import fmt
from kvroute.report.analyze.console import render_console


def printed(analysis: AnalysisResult, width: int = 160) -> str:
    console = Console(record=True, width=width, force_terminal=False)
    render_console(analysis, console)
    return console.export_text()


def test_the_summary_shows_the_overlap_and_ends_with_the_verdict(analysis: AnalysisResult) -> None:
    out = printed(analysis)
    assert fmt.percent(analysis.overlap.hit_ratio) in out
    assert "Verdict" in out
    assert out.rindex("Verdict") > out.index(fmt.percent(analysis.overlap.hit_ratio))
    assert "model-a" in out and "model-b" in out  # the breakdown by model


def test_a_narrow_terminal_never_splits_the_overlap_figure(analysis: AnalysisResult) -> None:
    out = printed(analysis, width=60)
    assert fmt.percent(analysis.overlap.hit_ratio) in out
