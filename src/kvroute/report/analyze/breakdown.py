"""The reuse breakdown in the analyze report: per model, user and class, and within a
conversation vs across requests."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable

from kvroute.analyze.breakdown import Breakdown, BreakdownResult
from kvroute.report import fmt
from kvroute.report.page.html import Block, Paragraph, Section, Table

_HEADERS = ("requests", "of prompt tokens", "ideal hit", "within conversation")
_SHOWN = 6


def _split(b: BreakdownResult) -> str:
    return (
        f"Of all prompt tokens, {fmt.percent(b.within_conversation_share)} are reused within "
        f"a conversation (its previous turn holds them: a per-conversation cache or session "
        f"affinity catches them) and {fmt.percent(b.across_requests_share)} across requests "
        "(only a cache shared between conversations catches them)."
    )


def _rows(d: Breakdown) -> list[list[str]]:
    return [
        [
            g.key,
            fmt.count(g.num_requests),
            fmt.percent(g.share_of_prompt_tokens),
            fmt.percent(g.hit_ratio),
            fmt.percent(g.within_conversation_tokens / g.prompt_tokens if g.prompt_tokens else 0),
        ]
        for g in d.groups
    ]


def _interesting(b: BreakdownResult) -> list[Breakdown]:
    """Dimensions with more than one group: one group says nothing the headline does not."""
    return [d for d in b.by if d.num_groups > 1]


def breakdown_section(b: BreakdownResult) -> Section:
    blocks: list[Block] = [Paragraph(_split(b))]
    for d in _interesting(b):
        blocks.append(Paragraph(f"By {d.dimension} ({fmt.plural(d.num_groups, 'group')}):"))
        blocks.append(Table([d.dimension, *_HEADERS], _rows(d)))
    return Section("Reuse by model, user and class", blocks)


def print_breakdown(b: BreakdownResult, console: Console) -> None:
    console.print(_split(b))
    for d in _interesting(b):
        t = RichTable(
            title=f"Reuse by {d.dimension} ({fmt.plural(d.num_groups, 'group')})",
            title_justify="left",
        )
        t.add_column(d.dimension)
        for name in _HEADERS:
            t.add_column(name, justify="right")
        for row in _rows(d)[:_SHOWN]:
            t.add_row(*row)
        console.print(t)
