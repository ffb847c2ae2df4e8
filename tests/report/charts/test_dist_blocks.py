"""Distribution and share blocks: a chart when it says more than its numbers."""

from __future__ import annotations

from kvroute.report.charts.dist_blocks import shares_block
from kvroute.report.page.html import Chart, Paragraph


def test_one_or_two_shares_are_a_sentence_and_more_are_a_chart() -> None:
    labels = ["short", "medium", "long", "very long"]
    one = shares_block("Prompt length mix", labels, [1.0, 0.0, 0.0, 0.0], "share of requests")
    assert one == Paragraph("Prompt length mix: 100.0 % short (share of requests).")
    two = shares_block("Mix", labels, [0.75, 0.25, 0.0, 0.0], "share of requests")
    assert isinstance(two, Paragraph) and "75.0 % short and 25.0 % medium" in two.text
    three = shares_block("Mix", labels, [0.5, 0.25, 0.25, 0.0], "share of requests")
    assert isinstance(three, Chart)
