"""The analyze page: the trace's own figures, verdict first, every measure in its section."""

from __future__ import annotations

from datetime import UTC, datetime
from html import unescape

from kvroute.analyze.result import AnalysisResult
from kvroute.report.analyze.page import analysis_page
from kvroute.report.page.html import render_page

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_page_shows_this_traces_overlap_and_verdict(analysis: AnalysisResult) -> None:
    page = analysis_page(analysis, NOW)
    text = unescape(render_page(page)).replace("\xa0", " ")
    assert page.subtitle == "shared.jsonl"
    assert "measured prefix overlap 71.2 % of 2,560 prompt tokens" in analysis.verdict.headline
    assert text.index(analysis.verdict.headline) < text.index('<section id="prefix-overlap">')
    assert '<th scope="row">prefix overlap (token level)</th><td>71.2 %</td>' in text
    titles = [s.title for s in page.sections]
    assert titles[0] == "Prefix overlap" and titles[-1] == "Definitions"
    assert "Prompt drift" in titles and "Reuse by model, user and class" in titles


def test_the_breakdown_section_sits_between_the_groups_and_the_drift(
    analysis: AnalysisResult,
) -> None:
    titles = [s.title for s in analysis_page(analysis, NOW).sections]
    at = titles.index("Reuse by model, user and class")
    assert titles[at - 1] == "Shared prefixes" and titles[at + 1] == "Prompt drift"
