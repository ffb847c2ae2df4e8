"""Bar placement for :func:`kvroute.report.charts.svg.bar_chart`: vertical and horizontal layouts.

Each layout takes category labels, named value groups (one value per label) and the value
axis, and returns the SVG parts of the plot, the plot box and the chart's total height.
Bars run from zero to their value, so negative values point the other way; non-finite
values draw nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvroute.report.charts.axes import Axis
from kvroute.report.charts.canvas import (
    AXIS,
    INK,
    PALETTE,
    Box,
    fit,
    grid_x,
    grid_y,
    line,
    num,
    text,
    text_width,
)
from kvroute.report.page.escape import escape

Group = tuple[str, Sequence[float]]
"""A series name and its values, one per category label."""


def _bar(x: float, y: float, w: float, h: float, *, index: int, tip: str) -> str:
    """One bar of group ``index`` (sets its colour), at least half a pixel in each dimension."""
    return (
        f'<rect x="{num(x)}" y="{num(y)}" width="{num(max(w, 0.5))}" '
        f'height="{num(max(h, 0.5))}" fill="{PALETTE[index % len(PALETTE)]}">'
        f"<title>{escape(tip)}</title></rect>"
    )


def _tip(label: str, name: str, value: float, axis: Axis) -> str:
    return f"{label} · {name}: {axis.format(value)}" if name else f"{label}: {axis.format(value)}"


def vertical_bars(
    labels: Sequence[str],
    groups: Sequence[Group],
    axis: Axis,
    *,
    width: int,
    height: int,
    top: float,
) -> tuple[list[str], Box, float]:
    """Categories left to right; labels rotate (and thin out) when they do not fit flat.

    The chart grows taller by the rotated labels' depth, so the plot keeps its height.
    """
    left = 40 + max(text_width(label, 12) for label in axis.labels())
    band = (width - 20 - left) / len(labels)
    shown = [fit(label, 150, 12) for label in labels]
    label_w = max(text_width(s, 12) for s in shown)
    rotate = label_w > band - 6
    extra = label_w * 0.64 + 4 if rotate else 0.0  # sin(40°) of the longest label
    box = Box(left, top, width - 20, height - 52)
    parts = grid_y(axis, box)
    zero_y = box.y(axis.fraction(0.0))
    bar_w = min(band * 0.8 / len(groups), 72.0)
    pad = (band - bar_w * len(groups)) / 2
    every = max(1, math.ceil(20 / band)) if rotate else 1
    for i, label in enumerate(labels):
        slot = box.left + i * band
        for j, (name, values) in enumerate(groups):
            if math.isfinite(values[i]):
                y = box.y(axis.fraction(values[i]))
                tip = _tip(label, name, values[i], axis)
                x = slot + pad + j * bar_w
                parts.append(_bar(x, min(y, zero_y), bar_w, abs(zero_y - y), index=j, tip=tip))
        if i % every == 0:
            cx, ty = slot + band / 2, box.bottom + 16
            turn = f' transform="rotate(-40 {num(cx)} {num(ty - 4)})"' if rotate else ""
            anchor = "end" if rotate else "middle"
            tip = label if shown[i] != label else ""
            parts.append(text(cx, ty, shown[i], anchor=anchor, extra=turn, tooltip=tip))
    return parts, box, height + extra


def horizontal_bars(
    labels: Sequence[str],
    groups: Sequence[Group],
    axis: Axis,
    *,
    width: int,
    height: int,
    top: float,
) -> tuple[list[str], Box, float]:
    """Categories top to bottom, each value printed at its bar's end.

    The chart is at least ``height`` tall and grows to give every bar 14 px.
    """
    shown = [fit(label, 200, 12) for label in labels]
    label_x = 28 + max(text_width(s, 12) for s in shown)
    left = label_x + 8
    if axis.lo < 0:  # room for the value labels printed left of negative bars
        left += max(text_width(axis.format(v), 11) for _, vs in groups for v in vs) + 4
    bar_h = 14.0
    total_h = max(float(height), top + (bar_h * len(groups) + 8) * len(labels) + 52)
    box = Box(left, top, width - 64, total_h - 52)
    band = (box.bottom - box.top) / len(labels)
    parts = grid_x(axis, box)
    zero_x = box.x(axis.fraction(0.0))
    for i, label in enumerate(labels):
        slot = box.top + i * band + (band - bar_h * len(groups)) / 2
        for j, (name, values) in enumerate(groups):
            if not math.isfinite(values[i]):
                continue
            x, y = box.x(axis.fraction(values[i])), slot + j * bar_h
            tip = _tip(label, name, values[i], axis)
            parts.append(_bar(min(x, zero_x), y + 1, abs(x - zero_x), bar_h - 2, index=j, tip=tip))
            ahead = 4 if values[i] >= 0 else -4
            anchor = "start" if values[i] >= 0 else "end"
            value_text = axis.format(values[i])
            parts.append(
                text(x + ahead, y + bar_h - 3, value_text, size=11, anchor=anchor, fill=INK)
            )
        label_y = box.top + i * band + band / 2 + 4
        tip = label if shown[i] != label else ""
        parts.append(text(label_x, label_y, shown[i], anchor="end", fill=INK, tooltip=tip))
    parts.append(line(zero_x, box.top, zero_x, box.bottom, stroke=AXIS))
    return parts, box, total_h
