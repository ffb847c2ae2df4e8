"""How a cache model's prediction compared with a real engine: terminal summary and HTML section."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from kvroute.report import fmt
from kvroute.report.charts.svg import Bars, Dash, Series, bar_chart, line_chart
from kvroute.report.page.html import (
    Block,
    Callout,
    CalloutKind,
    Chart,
    KeyValues,
    Paragraph,
    Section,
    Table,
)
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
        f"{v.engine} at {v.url} ({v.model}) · {fmt.plural(v.num_requests, 'request')} {how} · "
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


def _summary_table(v: ValidationResult) -> RichTable:
    """Hit ratio (from the responses, and /metrics when read) and cached tokens:
    predicted, measured, error."""
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
    return t


def _misses_table(misses: list[RequestCheck]) -> RichTable:
    m = RichTable(title="Largest misses", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
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
    return m


def render_validation(v: ValidationResult, console: Console) -> None:
    """Print the comparison of ``v`` to ``console``."""
    console.print(f"[bold]Validation[/] {run_line(v)}")
    console.print(f"[dim]model settings {settings_line(v)}[/]")
    console.print(_summary_table(v))
    c = v.comparison
    console.print(
        f"overall error [bold]{_pp(v.hit_ratio_error_pp)}[/] · per request: mean |error| "
        f"{v.request_mae_pp:.2f} pp of the prompt ({c.mean_abs_error_tokens:.1f} tokens), "
        f"exact {fmt.percent(c.exact_share, digits=0)}, bias {c.bias_tokens:+.1f} tokens"
    )
    misses = largest_misses(v)
    if misses:
        console.print(_misses_table(misses))
    for note in v.notes:
        console.print(f"[dim]note: {note}[/]")


def _verdict_callout(v: ValidationResult) -> Callout:
    """Predicted against measured overall (a warning past 1 pp), and the per-request error."""
    measured = v.counter_hit_ratio if v.counter_hit_ratio is not None else v.measured_hit_ratio
    exact = fmt.percent(v.comparison.exact_share, digits=0)
    return Callout(
        CalloutKind.INFO if abs(v.hit_ratio_error_pp) < 1 else CalloutKind.WARN,
        f"Predicted {fmt.percent(v.predicted_hit_ratio, digits=2)}, measured "
        f"{fmt.percent(measured, digits=2)}: {_pp(v.hit_ratio_error_pp)}",
        f"Per request, the prediction was exact for {exact} of the requests; "
        f"mean |error| {v.request_mae_pp:.2f} pp of the prompt.",
    )


def _hit_ratio_chart(v: ValidationResult) -> Chart:
    bars = [("predicted", v.predicted_hit_ratio), ("measured (responses)", v.measured_hit_ratio)]
    if v.counter_hit_ratio is not None:
        bars.append(("measured (/metrics)", v.counter_hit_ratio))
    return Chart(
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


def _cached_share(cached_tokens: int, prompt_tokens: int) -> float:
    return cached_tokens / prompt_tokens if prompt_tokens else 0.0


def _per_request_chart(v: ValidationResult) -> Chart:
    """Predicted and measured cached share of each prompt, in trace order."""
    xs = [float(r.index) for r in v.requests]
    share = [_cached_share(r.predicted_cached_tokens, r.prompt_tokens) for r in v.requests]
    measured = [_cached_share(r.measured_cached_tokens, r.prompt_tokens) for r in v.requests]
    return Chart(
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


def _error_chart(v: ValidationResult) -> Chart | None:
    """Predicted minus measured tokens per request; None when every one is exact or
    there are more than ``MAX_ERROR_BARS`` requests."""
    errors = [float(r.predicted_cached_tokens - r.measured_cached_tokens) for r in v.requests]
    if not any(errors) or len(errors) > MAX_ERROR_BARS:
        return None
    return Chart(
        bar_chart(
            [str(r.index) for r in v.requests],
            [Bars("predicted − measured", errors)],
            title="Error per request (tokens)",
            x_label="request",
            y_label="tokens",
        )
    )


def _misses_block(v: ValidationResult) -> Block:
    misses = largest_misses(v)
    if not misses:
        return Paragraph("Every request's prediction was exact.")
    return Table(
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


def validation_section(v: ValidationResult) -> Section:
    """The HTML section: overall bars, per-request lines, the largest misses."""
    blocks: list[Block] = [
        _verdict_callout(v),
        KeyValues(
            [
                ("engine", run_line(v)),
                ("model settings", settings_line(v)),
                ("replay passes", str(v.passes)),
            ]
        ),
        _hit_ratio_chart(v),
        _per_request_chart(v),
    ]
    errors = _error_chart(v)
    if errors is not None:
        blocks.append(errors)
    blocks.append(_misses_block(v))
    for note in v.notes:
        blocks.append(Callout(CalloutKind.WARN, "Note", note))
    return Section("Validation against the real engine", blocks)
