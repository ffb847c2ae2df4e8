"""Terminal summary of an analysis: a verdict panel and a few compact rich tables."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table

from kvroute.analyze.result import AnalysisResult, VerdictLevel
from kvroute.report import fmt
from kvroute.report.analyze.breakdown import print_breakdown
from kvroute.report.analyze.breakers import print_breakers
from kvroute.report.analyze.drift import print_drift
from kvroute.report.console_fit import Parts, Prose

_STYLE = {
    VerdictLevel.EQUIVALENT: "cyan",
    VerdictLevel.GREY_ZONE: "yellow",
    VerdictLevel.RADIX_PAYS: "green",
}


def _opt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return fmt.tokens(value)


def _kv(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(
        title=title, title_justify="left", show_header=False, box=None, pad_edge=False, min_width=44
    )
    # Never wrapped: a label cut mid-phrase ("p50 / p90 /" over "max") reads as two rows.
    t.add_column(style="dim", no_wrap=True)
    t.add_column(justify="right", no_wrap=True)
    for k, v in rows:
        t.add_row(k, v)
    return t


def _headline(r: AnalysisResult) -> Parts:
    tr = r.trace
    return Parts(
        [
            f"[bold]kvroute analyze[/] {tr.path}",
            tr.format,
            fmt.plural(tr.num_requests, "request"),
            f"{fmt.count(tr.num_skipped)} skipped" if tr.num_skipped else "",
            f"{fmt.tokens(r.overlap.prompt_tokens)} prompt tokens",
            f"tokenizer {tr.tokenizer}" if tr.tokenizer else "block hashes",
        ]
    )


def _overlap_rows(r: AnalysisResult) -> list[tuple[str, str]]:
    """What an ideal cache would reuse, and the longest common prefixes behind it."""
    ov = r.overlap
    rows = [(f"prefix overlap ({k})", fmt.percent(x)) for k, x in ov.figures()]
    rows[0] = (rows[0][0], f"[bold]{rows[0][1]}[/]")  # the trace's own figure, the verdict's
    if ov.warmup is not None and ov.cold_hit_ratio is not None:
        rows[0] = (f"{rows[0][0]}, warm", rows[0][1])
        rows.insert(1, ("… from an empty cache (whole trace)", fmt.percent(ov.cold_hit_ratio)))
        rows.insert(2, ("warm-up left out", f"{ov.warmup} ({fmt.count(ov.num_warmup_requests)})"))
    rows += [
        ("prefix every prompt shares", f"{fmt.tokens(ov.common_prefix_tokens)} tokens"),
        ("requests reusing more than that", fmt.percent(ov.share_requests_with_reuse)),
        (
            "LCP with earlier, p50 / p90",
            f"{_opt(ov.lcp_tokens.p50)} / {_opt(ov.lcp_tokens.p90)} tokens",
        ),
        (
            "LCP share of prompt, p50 / p90",
            f"{fmt.percent(ov.lcp_share.p50)} / {fmt.percent(ov.lcp_share.p90)}",
        ),
    ]
    if ov.reported_hit_ratio is not None:
        rows.append(("engine-reported cached", fmt.percent(ov.reported_hit_ratio)))
    pw = r.pairwise
    if pw.num_pairs:
        rows.append(
            (
                f"pairwise LCP p50 / p90 ({fmt.count(pw.num_pairs)} pairs)",
                f"{_opt(pw.lcp_tokens.p50)} / {_opt(pw.lcp_tokens.p90)} tokens",
            )
        )
    return rows


def _shape_rows(r: AnalysisResult) -> list[tuple[str, str]]:
    """Prompt and output lengths, features, arrivals, concurrency and sessions."""
    sh = r.shape
    rows = [
        (
            "prompt tokens p50 / p90 / max",
            f"{_opt(sh.prompt_tokens.p50)} / {_opt(sh.prompt_tokens.p90)} / {_opt(sh.prompt_tokens.max)}",
        ),
        ("output tokens p50 / p90", f"{_opt(sh.output_tokens.p50)} / {_opt(sh.output_tokens.p90)}"),
        (
            "with tools / structured output",
            f"{fmt.percent(sh.share_with_tools)} / {fmt.percent(sh.share_structured)}",
        ),
    ]
    if sh.mean_rate_per_s is not None and sh.duration_s is not None:
        rows.append(
            (
                "arrival rate (mean)",
                f"{sh.mean_rate_per_s:.2f} req/s over {fmt.duration(sh.duration_s)}",
            )
        )
    if sh.concurrency is not None:
        c = sh.concurrency
        rows.append(("in flight mean / p90 / max", f"{c.mean:.1f} / {c.p90:.0f} / {c.max}"))
    se = r.sessions
    if se.num_sessions:
        rows.append(
            (
                "sessions / follow-up turns",
                f"{fmt.count(se.num_sessions)} / {fmt.count(se.num_followup_turns)}",
            )
        )
        if se.continuation_share.mean is not None:
            rows.append(
                ("follow-up prompt from previous turn", fmt.percent(se.continuation_share.mean))
            )
    return rows


def _capacity_table(r: AnalysisResult) -> Table:
    """Hit ratio by capacity under LRU, FIFO and optimal eviction, over the capacities
    where the curves still move (from the first hit to where LRU reaches the infinite
    cache), at most 10 rows."""
    ru = r.reuse
    t = Table(
        title="Hit vs KV capacity (ideal cache)",
        title_justify="left",
        box=None,
        pad_edge=False,
        min_width=44,
    )
    for name in ("capacity", "LRU", "FIFO", "optimal"):
        t.add_column(name, justify="right", style="dim" if name == "capacity" else None)
    rows = list(
        zip(ru.capacity_tokens, ru.hit_ratio, ru.fifo_hit_ratio, ru.optimal_hit_ratio, strict=True)
    )
    moving = [
        i for i, (_, lru, _, opt) in enumerate(rows) if opt > 0 and lru < ru.infinite_hit_ratio
    ]
    start = moving[0] if moving else 0
    end = min(len(rows), (moving[-1] + 2) if moving else 1)
    shown = rows[start:end]
    if len(shown) > 10:  # every other capacity, the last one kept
        shown = shown[:: -(-len(shown) // 10)] + ([shown[-1]] if len(shown) % 2 == 0 else [])
    labels = [f"{fmt.capacity(cap)} tokens" for cap, *_ in shown]
    pool = ru.pool
    if pool is not None:  # the user's pool, in its place on the curve
        at = sum(cap < pool.capacity_tokens for cap, *_ in shown)
        shown.insert(
            at,
            (pool.capacity_tokens, pool.lru_hit_ratio, pool.fifo_hit_ratio, pool.optimal_hit_ratio),
        )
        labels.insert(at, f"[bold]your pool {fmt.capacity(pool.capacity_tokens)}[/]")
    for label, (_cap, lru, fifo, opt) in zip(labels, shown, strict=True):
        t.add_row(label, fmt.percent(lru), fmt.percent(fifo), fmt.percent(opt))
    sampled = "" if ru.sample_rate == 1 else f"sampled {fmt.percent(ru.sample_rate, digits=2)}"
    if sampled:
        t.caption = sampled
    return t


def _print_tables(tables: list[Table], console: Console) -> None:
    """Side by side when they fit the terminal whole, else one under the other."""
    gaps = 4 * (len(tables) - 1)
    if sum(console.measure(t).maximum for t in tables) + gaps <= console.width:
        grid = Table.grid(padding=(0, 4))
        grid.add_row(*tables)
        console.print(grid)
    else:
        for table in tables:
            console.print(table)
            console.print()


def _groups_table(r: AnalysisResult, width: int, *, show_text: bool) -> Table:
    """The ``--top`` shared prefixes, with the start of their text when ``show_text``;
    the caption says how many there are in all."""
    shown = len(r.groups.top)
    t = Table(
        title="Shared prefixes that save the most prefill",
        title_justify="left",
        caption=f"the top {shown} of "
        + fmt.plural(r.groups.num_groups, "shared prefix", "shared prefixes")
        + " (--top N shows more)"
        if r.groups.num_groups > shown
        # --top asked for more than there are: say so, or the short table looks cut
        else f"all {fmt.plural(shown, 'shared prefix', 'shared prefixes')} the trace has",
        caption_justify="left",
    )
    for name in ("#", "requests", "tokens", "saved", "of reuse"):
        t.add_column(name, justify="right", no_wrap=True)
    if show_text:
        # the text gives way first: the numbers keep their width down to ~60 columns
        t.add_column("text", overflow="ellipsis", no_wrap=True, max_width=max(4, width - 50))
    for g in r.groups.top:
        row = [
            str(g.rank),
            fmt.count(g.num_requests),
            f"{fmt.tokens(g.start_tokens)}-{fmt.tokens(g.prefix_tokens)}"
            if not g.sub_block
            else "< 1 block",
            fmt.tokens(g.tokens_saved),
            fmt.percent(g.share_of_reuse),
        ]
        if show_text:
            row.append(" ".join((g.preview_head or "").split())[:120])
        t.add_row(*row)
    return t


def _verdict_panel(r: AnalysisResult) -> Panel:
    v = r.verdict
    body = Group(
        Prose(v.headline, style="bold", markup_tags=False),
        *[Prose(f"• {reason}", indent=2, markup_tags=False) for reason in v.reasons],
    )
    return Panel(body, title="Verdict", border_style=_STYLE[v.level], title_align="left")


def render_console(result: AnalysisResult, console: Console, *, show_text: bool = True) -> None:
    """Print the summary of ``result`` to ``console``."""
    r = result
    console.print(_headline(r))
    tables = [
        _kv("Prefix overlap (ideal cache)", _overlap_rows(r)),
        _kv("Traffic shape", _shape_rows(r)),
        _capacity_table(r),
    ]
    _print_tables(tables, console)
    if r.groups.top:
        console.print(_groups_table(r, console.width, show_text=show_text))
    if r.breakdown is not None:
        print_breakdown(r.breakdown, console)
    if r.breakers is not None:
        print_breakers(r.breakers, console, show_text=show_text)
    print_drift(r.drift, console)
    console.print(_verdict_panel(r))
