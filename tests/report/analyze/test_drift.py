"""Prompt drift in the analyze report: a row per change with its figures, nothing when none."""

from __future__ import annotations

from rich.console import Console

from kvroute.analyze.drift import DriftResult, PrefixChange
from kvroute.report.analyze.drift import drift_section, print_drift
from kvroute.report.page.html import Paragraph, Table

CHANGE = PrefixChange(
    at_request=1199,
    at_s=None,
    at_offset_s=125.0,
    old_prefix_tokens=2048,
    new_prefix_tokens=2112,
    common_prefix_tokens=1536,
    changed_tokens=512,
    share_before=0.9,
    share_after=0.85,
    num_requests_old=1200,
    num_requests_new=800,
    hit_ratio_before=0.8,
    hit_ratio_after=0.6,
    preview_old="You are   a helpful\nassistant",
    preview_new="You are a careful assistant",
)


def test_a_change_is_one_row_with_when_and_what_is_prefilled_again() -> None:
    section = drift_section(DriftResult(200, 0.1, 10, [CHANGE]))
    table = next(b for b in section.blocks if isinstance(b, Table))
    assert [list(row) for row in table.rows] == [
        [
            "request 1,200, +2 min 05 s",
            "2,048 → 2,112",
            "1,536",
            "512",
            "90.0 % → 85.0 %",
            "80.0 % → 60.0 %",
        ]
    ]
    previews = [b.text for b in section.blocks if isinstance(b, Paragraph)]
    assert any(
        "“You are a helpful assistant”" in p and "now “You are a careful" in p for p in previews
    )


def test_no_change_says_what_was_looked_at_and_prints_nothing() -> None:
    none = DriftResult(200, 0.1, 7, [])
    (summary,) = drift_section(none).blocks
    assert isinstance(summary, Paragraph)
    assert "7 windows of 200 requests" in summary.text and "10 %" in summary.text
    console = Console(record=True, width=120)
    print_drift(none, console)
    assert console.export_text() == ""
    print_drift(DriftResult(200, 0.1, 7, [CHANGE]), console)
    assert "2,048 → 2,112" in console.export_text()
