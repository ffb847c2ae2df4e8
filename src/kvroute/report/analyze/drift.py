"""Prompt drift in the analyze report: a short HTML section and a terminal table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable

from kvroute.analyze.drift import DriftResult, PrefixChange
from kvroute.report import fmt
from kvroute.report.page.html import Block, Paragraph, Section, Table

_HEADERS = (
    "when",
    "prefix tokens old → new",
    "kept",
    "prefill again",
    "share of requests before → after",
    "overlap before → after",
)


def _when(c: PrefixChange) -> str:
    at = f"request {fmt.count(c.at_request + 1)}"
    return at if c.at_offset_s is None else f"{at}, +{fmt.duration(c.at_offset_s)}"


def _row(c: PrefixChange) -> list[str]:
    return [
        _when(c),
        f"{fmt.count(c.old_prefix_tokens)} → {fmt.count(c.new_prefix_tokens)}",
        fmt.count(c.common_prefix_tokens),
        fmt.count(c.changed_tokens),
        f"{fmt.percent(c.share_before)} → {fmt.percent(c.share_after)}",
        f"{fmt.percent(c.hit_ratio_before)} → {fmt.percent(c.hit_ratio_after)}",
    ]


def _summary(d: DriftResult) -> str:
    if not d.changes:
        return (
            f"No frequent shared prefix changed version ({fmt.count(d.num_windows)} windows of "
            f"{fmt.count(d.window_requests)} requests; a prefix counts when ≥ "
            f"{fmt.percent(d.min_share, digits=0)} of a window's requests carry it)."
        )
    n = len(d.changes)
    return (
        f"{n} shared prefix{'es' if n > 1 else ''} (system prompt, tool schema) changed version. "
        "Tokens after the kept part are prefilled again once per cache copy (each replica, "
        "each llama.cpp slot); overlap is the trace's ideal prefix overlap in the window "
        f"of {fmt.count(d.window_requests)} requests before the change and the one holding it."
    )


def drift_section(d: DriftResult) -> Section:
    blocks: list[Block] = [Paragraph(_summary(d))]
    if d.changes:
        rows = [_row(c) for c in d.changes]
        blocks.append(Table(list(_HEADERS), rows))
        for c in d.changes:
            if c.preview_old is not None and c.preview_new is not None:
                blocks.append(
                    Paragraph(
                        f"{_when(c)}: first changed block was “{' '.join(c.preview_old.split())[:120]}”, "
                        f"now “{' '.join(c.preview_new.split())[:120]}”."
                    )
                )
    return Section("Prompt drift", blocks)


def print_drift(d: DriftResult, console: Console) -> None:
    """The terminal lines: nothing when no prefix changed."""
    if not d.changes:
        return
    t = RichTable(title="Prompt drift: shared prefixes that changed version", title_justify="left")
    for name in _HEADERS:
        t.add_column(name, justify="right")
    for c in d.changes:
        t.add_row(*_row(c))
    console.print(t)
