"""Cache breakers in the analyze report: a terminal table and an HTML section."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable

from kvroute.analyze.breaker_cost import Breaker, BreakersResult
from kvroute.report import fmt
from kvroute.report.page.html import Block, Paragraph, Section, Table

_HEADERS = ("kind", "field", "token", "requests", "variants", "ideal hit before → after")


def _engines(f: Breaker) -> str:
    return ", ".join(
        f"{e.engine} {fmt.percent(e.hit_before)} → {fmt.percent(e.hit_after)}" for e in f.engines
    )


def _row(f: Breaker) -> list[str]:
    return [
        f.kind.value,
        f.field,
        fmt.count(f.token_position),
        f"{fmt.count(f.num_requests)} ({fmt.percent(f.share_of_requests)})",
        fmt.count(f.num_variants),
        f"{fmt.percent(f.ideal_hit_before)} → {fmt.percent(f.ideal_hit_after)}",
    ]


def _where(f: Breaker) -> str | None:
    if f.context_before is None or f.context_after is None:
        return None
    before = " ".join(f.context_before.split())[-40:]
    after = " ".join(f.context_after.split())[:40]
    examples = "; ".join(" ".join(e.split())[:60] for e in f.examples or [])
    return f"…{before}⟨varies⟩{after}… e.g. {examples}"


def _summary(b: BreakersResult) -> str:
    n = len(b.findings)
    if not n:
        return (
            f"No cache breaker found in {fmt.plural(b.num_requests_examined, 'request')}: no "
            "per-request content inside a shared prefix whose fix would raise the hit by "
            f"{fmt.percent(b.min_gain, digits=1)} or more ({fmt.count(b.num_candidates)} "
            "variations checked)."
        )
    at = f" (engines at {fmt.capacity(b.capacity_tokens)} tokens)" if b.capacity_tokens else ""
    engines = ", ".join(
        f"{e.engine} {fmt.percent(e.hit_before)} → {fmt.percent(e.hit_after)}"
        for e in b.engines_after_all
    )
    return (
        f"{n} cache breaker{'s' if n > 1 else ''}: content that varies between requests "
        "inside an otherwise shared prefix. Fixing all of them takes the ideal hit from "
        f"{fmt.percent(b.ideal_hit_before)} to {fmt.percent(b.ideal_hit_after_all)}"
        + (f"; simulated{at}: {engines}" if engines else "")
        + "."
    )


def breakers_section(b: BreakersResult) -> Section:
    blocks: list[Block] = [Paragraph(_summary(b))]
    if b.findings:
        rows = [[*_row(f), _engines(f), f.fix] for f in b.findings]
        blocks.append(Table([*_HEADERS, "simulated before → after", "fix"], rows))
        for i, f in enumerate(b.findings, 1):
            where = _where(f)
            if where is not None:
                blocks.append(Paragraph(f"{i}. {f.kind.value} in {f.field}: {where}"))
    return Section("Cache breakers", blocks)


def print_breakers(b: BreakersResult, console: Console, *, show_text: bool) -> None:
    """The summary line, and a table with each finding's fix when there are findings."""
    if not b.findings:
        console.print(f"[dim]{_summary(b)}[/]")
        return
    t = RichTable(title="Cache breakers", title_justify="left")
    for name in ("#", *_HEADERS):
        t.add_column(name, justify="right" if name not in ("kind", "field") else "left")
    if any(f.engines for f in b.findings):
        t.add_column("simulated before → after")
    for i, f in enumerate(b.findings, 1):
        t.add_row(str(i), *_row(f), *([_engines(f)] if f.engines else []))
    console.print(t)
    for i, f in enumerate(b.findings, 1):
        where = _where(f) if show_text else None
        console.print(
            f"  {i}. [bold]fix:[/] {f.fix}" + (f"\n     [dim]{where}[/]" if where else "")
        )
    console.print(_summary(b))
