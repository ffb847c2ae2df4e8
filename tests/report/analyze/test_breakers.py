"""Cache breakers in the analyze report: each finding's cost and fix, the text only when allowed."""

from __future__ import annotations

from rich.console import Console

from kvroute.analyze.breaker_cost import Breaker, BreakersResult, EngineGain
from kvroute.analyze.breaker_kinds import BreakerKind
from kvroute.report.analyze.breakers import breakers_section, print_breakers
from kvroute.report.page.html import Paragraph, Table

TIMESTAMP = Breaker(
    kind=BreakerKind.TIMESTAMP,
    field="messages[0].content (system)",
    token_position=412,
    char_offset=1830,
    num_requests=950,
    share_of_requests=0.95,
    num_variants=950,
    examples=["2026-01-01T10:00:01Z", "2026-01-01T10:00:07Z"],
    context_before="You are a helpful assistant.\nThe time is ",
    context_after=".\nAnswer briefly.",
    ideal_hit_before=0.12,
    ideal_hit_after=0.81,
    engines=[EngineGain("vllm", 0.1, 0.7)],
    fix="move the timestamp after the shared prefix (the last user message)",
)


def result(*findings: Breaker) -> BreakersResult:
    return BreakersResult(
        num_requests_examined=1000,
        num_candidates=3,
        min_gain=0.01,
        capacity_tokens=65536,
        ideal_hit_before=0.12,
        ideal_hit_after_all=0.81 if findings else 0.12,
        engines_after_all=[EngineGain("vllm", 0.1, 0.7)] if findings else [],
        findings=list(findings),
    )


def test_a_finding_is_a_row_with_its_cost_and_its_fix() -> None:
    section = breakers_section(result(TIMESTAMP))
    summary = section.blocks[0]
    assert isinstance(summary, Paragraph)
    assert summary.text.startswith("1 cache breaker: ")
    assert (
        "from 12.0 % to 81.0 %; simulated (engines at 64Ki tokens): vllm 10.0 % → 70.0 %"
        in summary.text
    )
    table = section.blocks[1]
    assert isinstance(table, Table)
    assert list(table.rows[0]) == [
        "timestamp",
        "messages[0].content (system)",
        "412",
        "950 (95.0 %)",
        "950",
        "12.0 % → 81.0 %",
        "vllm 10.0 % → 70.0 %",
        TIMESTAMP.fix,
    ]
    where = section.blocks[2]
    assert isinstance(where, Paragraph)
    assert where.text.endswith(
        "The time is⟨varies⟩. Answer briefly.… e.g. 2026-01-01T10:00:01Z; 2026-01-01T10:00:07Z"
    )


def test_the_terminal_names_the_fix_and_leaves_the_text_out_when_asked() -> None:
    def printed(show_text: bool) -> str:
        console = Console(record=True, width=200)
        print_breakers(result(TIMESTAMP), console, show_text=show_text)
        return console.export_text()

    with_text, without = printed(True), printed(False)
    assert "1. fix: move the timestamp after the shared prefix" in with_text
    assert "⟨varies⟩" in with_text and "⟨varies⟩" not in without
    assert "2026-01-01T10:00:01Z" not in without


def test_no_finding_says_how_much_was_examined() -> None:
    console = Console(record=True, width=200)
    print_breakers(result(), console, show_text=True)
    assert console.export_text().startswith(
        "No cache breaker found in 1,000 requests: no per-request content"
    )
    assert breakers_section(result()).blocks[1:] == ()
