"""How a cache model's prediction compared with a real engine: terminal summary and HTML section."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from kvroute.report import fmt
from kvroute.report.html import (
    Block,
    Callout,
    CalloutKind,
    Chart,
    KeyValues,
    Paragraph,
    Section,
    Table,
)
from kvroute.report.svg import Bars, Dash, Series, bar_chart, line_chart
from kvroute.validate.result import RequestCheck, ResetOutcome, ValidationResult

MAX_MISSES = 10
MAX_ERROR_BARS = 200


def run_line(v: ValidationResult) -> str:
    """How the trace was served, in one line."""
    how = (
        f"closed loop of {v.concurrency}"
        if v.concurrency is not None
        else "at the trace's arrival times"
    )
    reset = {
        ResetOutcome.RESET: "cache reset first",
        ResetOutcome.NEEDS_RESTART: "cache NOT reset (the engine offers no reset)",
        ResetOutcome.SKIPPED: "cache not reset (--no-reset)",
    }
    return (
        f"{v.engine} at {v.url} ({v.model}) · {fmt.count(v.num_requests)} requests {how} · "
        f"{reset[v.reset]} · served in {fmt.duration(v.serve_s)}"
    )


def settings_line(v: ValidationResult) -> str:
    reported = ", ".join(f"{k} {val}" for k, val in v.setup.reported.items())
    given = ", ".join(f"{k} {val}" for k, val in v.setup.given.items())
    return f"from the engine: {reported} · given: {given}"


def _pp(value: float) -> str:
    return f"{value:+.2f} pp"


def largest_misses(v: ValidationResult, limit: int = MAX_MISSES) -> list[RequestCheck]:
    """Requests whose prediction missed, largest miss first."""
    missed = [r for r in v.requests if r.predicted_cached_tokens != r.measured_cached_tokens]
    missed.sort(key=lambda r: -abs(r.predicted_cached_tokens - r.measured_cached_tokens))
    return missed[:limit]


def render_validation(v: ValidationResult, console: Console) -> None:
    """Print the comparison of ``v`` to ``console``."""
    console.print(f"[bold]Validation[/] {run_line(v)}")
    console.print(f"[dim]model settings {settings_line(v)}[/]")
    t = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for i, h in enumerate(("", "predicted", "measured", "error")):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    t.add_row(
        "hit ratio",
        fmt.percent(v.predicted_hit_ratio, digits=2),
        fmt.percent(v.measured_hit_ratio, digits=2),
        _pp(100 * (v.predicted_hit_ratio - v.measured_hit_ratio)),
    )
    if v.counter_hit_ratio is not None:
        t.add_row(
            "hit ratio (/metrics)",
            "",
            fmt.percent(v.counter_hit_ratio, digits=2),
            _pp(100 * (v.predicted_hit_ratio - v.counter_hit_ratio)),
        )
    t.add_row(
        "cached tokens",
        fmt.count(v.predicted_cached_tokens),
        fmt.count(v.measured_cached_tokens),
        f"{v.predicted_cached_tokens - v.measured_cached_tokens:+,}",
    )
    console.print(t)
    c = v.comparison
    console.print(
        f"overall error [bold]{_pp(v.hit_ratio_error_pp)}[/] · per request: mean |error| "
        f"{v.request_mae_pp:.2f} pp of the prompt ({c.mean_abs_error_tokens:.1f} tokens), "
        f"exact {fmt.percent(c.exact_share, digits=0)}, bias {c.bias_tokens:+.1f} tokens"
    )
    misses = largest_misses(v)
    if misses:
        m = RichTable(
            title="Largest misses", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
        )
        for h in ("#", "endpoint", "prompt", "predicted", "measured"):
            m.add_column(h, justify="left" if h == "endpoint" else "right", no_wrap=True)
        for r in misses:
            m.add_row(
                str(r.index),
                r.endpoint,
                fmt.count(r.prompt_tokens),
                fmt.count(r.predicted_cached_tokens),
                fmt.count(r.measured_cached_tokens),
            )
        console.print(m)
    for note in v.notes:
        console.print(f"[dim]note: {note}[/]")


def validation_section(v: ValidationResult) -> Section:
    """The HTML section: overall bars, per-request lines, the largest misses."""
    c = v.comparison
    blocks: list[Block] = [
        Callout(
            CalloutKind.INFO if abs(v.hit_ratio_error_pp) < 1 else CalloutKind.WARN,
            f"Predicted {fmt.percent(v.predicted_hit_ratio, digits=2)}, measured "
            f"{fmt.percent(v.counter_hit_ratio if v.counter_hit_ratio is not None else v.measured_hit_ratio, digits=2)}: "
            f"{_pp(v.hit_ratio_error_pp)}",
            f"Per request, the prediction was exact for {fmt.percent(c.exact_share, digits=0)} of "
            f"the requests; mean |error| {v.request_mae_pp:.2f} pp of the prompt.",
        ),
        KeyValues(
            [
                ("engine", run_line(v)),
                ("model settings", settings_line(v)),
                ("replay passes", str(v.passes)),
            ]
        ),
    ]
    bars = [("predicted", v.predicted_hit_ratio), ("measured (responses)", v.measured_hit_ratio)]
    if v.counter_hit_ratio is not None:
        bars.append(("measured (/metrics)", v.counter_hit_ratio))
    blocks.append(
        Chart(
            bar_chart(
                [b[0] for b in bars],
                [b[1] for b in bars],
                title="Hit ratio: model vs engine",
                x_label="",
                y_label="hit ratio",
                percent=True,
                horizontal=True,
            )
        )
    )
    xs = [float(r.index) for r in v.requests]
    share = [
        (r.predicted_cached_tokens / r.prompt_tokens if r.prompt_tokens else 0.0)
        for r in v.requests
    ]
    measured = [
        (r.measured_cached_tokens / r.prompt_tokens if r.prompt_tokens else 0.0) for r in v.requests
    ]
    blocks.append(
        Chart(
            line_chart(
                [
                    Series("predicted", xs, share),
                    Series("measured", xs, measured, dash=Dash.DASHED),
                ],
                title="Cached share of each prompt, in trace order",
                x_label="request",
                y_label="cached share",
                percent_y=True,
                y_min=0,
                y_max=1,
            )
        )
    )
    errors = [float(r.predicted_cached_tokens - r.measured_cached_tokens) for r in v.requests]
    if any(errors) and len(errors) <= MAX_ERROR_BARS:
        blocks.append(
            Chart(
                bar_chart(
                    [str(r.index) for r in v.requests],
                    [Bars("predicted − measured", errors)],
                    title="Error per request (tokens)",
                    x_label="request",
                    y_label="tokens",
                )
            )
        )
    misses = largest_misses(v)
    if misses:
        blocks.append(
            Table(
                ["#", "endpoint", "prompt tokens", "predicted cached", "measured cached"],
                [
                    [
                        str(r.index),
                        r.endpoint,
                        fmt.count(r.prompt_tokens),
                        fmt.count(r.predicted_cached_tokens),
                        fmt.count(r.measured_cached_tokens),
                    ]
                    for r in misses
                ],
            )
        )
    else:
        blocks.append(Paragraph("Every request's prediction was exact."))
    for note in v.notes:
        blocks.append(Callout(CalloutKind.WARN, "Note", note))
    return Section("Validation against the real engine", blocks)
