"""The HTML report of ``kvroute predict``: saturation verdicts first, then each engine's
latency percentiles with intervals, the TTFT split as a stacked bar (why one engine is
faster), and per-request distributions (shared chart code: :mod:`kvroute.report.charts.svg`,
:mod:`kvroute.report.charts.dist_blocks`).

The stacked bar is drawn here from the shared canvas pieces (axis, legend, grid): the
shared :func:`~kvroute.report.charts.svg.bar_chart` groups bars side by side, and a split is
read as parts of one whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from kvroute.predict.result import Estimate, Prediction
from kvroute.report.charts.axes import linear_axis
from kvroute.report.charts.bar_layout import Group
from kvroute.report.charts.canvas import (
    AXIS,
    INK,
    PALETTE,
    Box,
    Dash,
    LegendKey,
    axis_titles,
    grid_x,
    legend,
    line,
    num,
    svg_open,
    text,
    text_width,
)
from kvroute.report.charts.dist_blocks import cdf_block
from kvroute.report.page.escape import escape
from kvroute.report.page.html import (
    Block,
    Callout,
    CalloutKind,
    Chart,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
)
from kvroute.stats import describe

SPLIT_PARTS = ("queue", "uncached prefill", "cached-context attention", "overhead")


def _ms(seconds: float) -> str:
    return "—" if math.isnan(seconds) else f"{seconds * 1e3:,.1f} ms"


def _est(e: Estimate) -> str:
    return f"{_ms(e.value)} [{e.ci95.low * 1e3:,.1f}–{e.ci95.high * 1e3:,.1f}]"


def stacked_bars(
    labels: Sequence[str], groups: Sequence[Group], *, title: str, x_label: str, width: int = 720
) -> str:
    """Horizontal bars, one per label, each the sum of ``groups``' values stacked left to
    right (values below zero are drawn as zero; the total is printed at the end)."""
    totals = [sum(max(g[1][i], 0.0) for g in groups) for i in range(len(labels))]
    axis = linear_axis([*totals, 0.0], include_zero=True)
    keys = [LegendKey(name, PALETTE[j % len(PALETTE)], Dash.SOLID, True) for j, (name, _) in
            enumerate(groups)]  # fmt: skip
    legend_parts, legend_h = legend(keys, width, 32)
    top = 44 + legend_h
    bar_h = 22.0
    label_x = 28 + max(text_width(s, 12) for s in labels)
    total_h = top + (bar_h + 12) * len(labels) + 52
    box = Box(label_x + 8, top, width - 80, total_h - 52)
    parts = svg_open(width, total_h, title) + legend_parts + grid_x(axis, box)
    for i, label in enumerate(labels):
        y = box.top + i * (bar_h + 12) + 6
        x0 = 0.0
        for j, (name, values) in enumerate(groups):
            v = max(values[i], 0.0)
            xa, xb = box.x(axis.fraction(x0)), box.x(axis.fraction(x0 + v))
            tip = escape(f"{label} · {name}: {v * 1e3:,.1f} ms")
            parts.append(
                f'<rect x="{num(xa)}" y="{num(y)}" width="{num(max(xb - xa, 0.5))}" '
                f'height="{num(bar_h)}" fill="{PALETTE[j % len(PALETTE)]}"><title>{tip}</title>'
                "</rect>"
            )
            x0 += v
        end = box.x(axis.fraction(x0))
        parts.append(text(end + 4, y + bar_h - 6, f"{x0 * 1e3:,.1f} ms", size=11, fill=INK))
        parts.append(text(label_x, y + bar_h - 6, label, anchor="end", fill=INK))
    parts.append(line(box.left, box.top, box.left, box.bottom, stroke=AXIS))
    parts += axis_titles(box, x_label, "", total_h - 14)
    return "\n".join([*parts, "</svg>"])


def _verdicts(preds: Sequence[Prediction]) -> list[Block]:
    out: list[Block] = []
    for p in preds:
        kind = CalloutKind.WARN if p.saturation.saturated else CalloutKind.GOOD
        title = f"{p.engine}: {'saturated' if p.saturation.saturated else 'keeps up'}"
        out.append(Callout(kind, title, p.saturation.verdict))
    return out


def _summary_table(preds: Sequence[Prediction]) -> Table:
    rows = []
    for p in preds:
        for name, m in (("TTFT", p.ttft), ("TPOT", p.tpot), ("E2E", p.e2e), ("queue", p.queue)):
            rows.append([p.engine, name, _est(m.p50), _est(m.p90), _est(m.p99)])
    return Table(
        ["engine", "metric", "p50 [95 %]", "p90 [95 %]", "p99 [95 %]"],
        rows,
        caption="point prediction and 95 % interval (coefficient draws × the fit's residual spread)",
    )


def _split_chart(preds: Sequence[Prediction]) -> Chart:
    s = [p.ttft_split for p in preds]
    groups: list[Group] = [
        ("queue", [x.queue_s for x in s]),
        ("uncached prefill", [x.uncached_prefill_s for x in s]),
        ("cached-context attention", [x.cached_attention_s for x in s]),
        ("overhead", [x.overhead_s for x in s]),
    ]
    return Chart(
        stacked_bars(
            [p.engine for p in preds], groups, title="mean TTFT, split", x_label="seconds"
        ),
        caption=(
            "queue: waiting to start; uncached prefill: the request's own new tokens; "
            "cached-context attention: its attention over, and KV reads of, the cached prefix; "
            "overhead: step constants, weight reads, sharing steps, serving"
        ),
    )


def _distributions(preds: Sequence[Prediction]) -> list[Block]:
    out: list[Block] = []
    for metric, attr in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s")):
        for p in preds:
            d = describe(getattr(p.requests, attr))
            out.append(cdf_block(d, f"{p.engine}: {metric} per request", "seconds", p.engine))
    return out


def prediction_page(preds: Sequence[Prediction], generated_at: datetime) -> Page:
    """One page for one or more engines' predictions of the same load."""
    if not preds:
        raise ValueError("nothing to report")
    p0 = preds[0]
    facts = KeyValues(
        [
            ("model", p0.model),
            ("hardware", f"{p0.num_gpus} × {p0.hardware}"),
            ("load", p0.load),
            ("requests", f"{p0.requests.admitted.shape[0]:,}"),
            *[(f"{p.engine} fit", p.calibration_source) for p in preds],
            *[(f"{p.engine} hit ratio", f"{p.hit_ratio:.1%}") for p in preds],
        ]
    )
    notes = [Paragraph(f"{p.engine}: {n}") for p in preds for n in p.notes]
    return Page(
        title="kvroute predict",
        subtitle=f"{', '.join(p.engine for p in preds)} · {p0.model} · {p0.load}",
        generated_at=generated_at,
        lead=[*_verdicts(preds), facts],
        sections=[
            Section("Latency", [_summary_table(preds)]),
            Section("Why: the TTFT split", [_split_chart(preds)]),
            Section("Distributions", _distributions(preds)),
            *([Section("Notes", notes)] if notes else []),
        ],
    )
