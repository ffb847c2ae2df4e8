"""Low-level SVG drawing shared by the charts in :mod:`kvroute.report.charts.svg`.

Pure string builders in SVG pixel coordinates: the plot box, text, legend, gridlines and
axis titles. Every piece of text goes through :func:`kvroute.report.page.escape.escape`.
Coordinates are printed with one decimal so output is byte-for-byte deterministic.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from kvroute.report.charts.axes import Axis
from kvroute.report.page.escape import escape

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000")
"""Okabe–Ito colours in series order (yellow left out: unreadable on white)."""

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
GRID, AXIS, MUTED, INK = "#e6e6e6", "#8c8c8c", "#555555", "#222222"


class Dash(enum.Enum):
    """Stroke pattern of a line."""

    SOLID = ""
    DASHED = "7 4"
    DOTTED = "2 3"


@dataclass(frozen=True, slots=True)
class Box:
    """The plot area in SVG pixels."""

    left: float
    top: float
    right: float
    bottom: float

    def x(self, fraction: float) -> float:
        return self.left + fraction * (self.right - self.left)

    def y(self, fraction: float) -> float:
        return self.bottom - fraction * (self.bottom - self.top)


@dataclass(frozen=True, slots=True)
class LegendKey:
    name: str
    color: str
    dash: Dash
    is_bar: bool


def num(value: float) -> str:
    """A coordinate with one decimal, ``".0"`` dropped (keeps output short and stable)."""
    return f"{value:.1f}".removesuffix(".0")


def text_width(text: str, size: float) -> float:
    """Estimated rendered width of ``text`` in pixels (an average glyph is 0.58 em)."""
    return len(text) * size * 0.58


def fit(text: str, width_px: float, size: float) -> str:
    """``text`` cut with an ellipsis to fit about ``width_px`` pixels (at least 4 chars)."""
    max_chars = max(4, int(width_px / (size * 0.58)))
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def text(
    x: float,
    y: float,
    content: str,
    *,
    size: int = 12,
    anchor: str = "start",
    fill: str = MUTED,
    extra: str = "",
    tooltip: str = "",
) -> str:
    """A ``<text>`` element; ``extra`` is appended verbatim (trusted attributes only) and a
    non-empty ``tooltip`` becomes a hover ``<title>``."""
    tip = f"<title>{escape(tooltip)}</title>" if tooltip else ""
    return (
        f'<text x="{num(x)}" y="{num(y)}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{fill}"{extra}>{tip}{escape(content)}</text>'
    )


def dash_attr(dash: Dash) -> str:
    """The ``stroke-dasharray`` attribute for ``dash`` (empty for solid lines)."""
    return f' stroke-dasharray="{dash.value}"' if dash.value else ""


def line(x1: float, y1: float, x2: float, y2: float, *, stroke: str, extra: str = "") -> str:
    """A straight line segment; ``extra`` is appended verbatim (trusted attributes only)."""
    return (
        f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" '
        f'stroke="{stroke}"{extra}/>'
    )


def svg_open(width: int, height: float, title: str) -> list[str]:
    """The root element (sized by ``viewBox``, labelled for screen readers), a white
    background and the chart title. The caller closes the root with ``</svg>``."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {num(height)}" '
        f'width="{width}" height="{num(height)}" role="img" aria-label="{escape(title)}" '
        f'font-family="{FONT}">',
        f'<rect width="{width}" height="{num(height)}" fill="#ffffff"/>',
        text(16, 24, fit(title, width - 32, 15), size=15, fill=INK, extra=' font-weight="600"'),
    ]


def clip_id(*parts: object) -> str:
    """A clipPath id derived from the chart's inputs: stable across runs, and distinct
    between different charts embedded in the same page."""
    return "kvc" + hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def legend(keys: Sequence[LegendKey], width: int, top: float) -> tuple[list[str], float]:
    """Legend entries flowed into rows from ``top``; returns the parts and the height used."""
    if len(keys) < 2:
        return [], 0.0
    parts: list[str] = []
    x, y = 16.0, top + 12
    for key in keys:
        item_w = 28 + text_width(key.name, 12) + 16
        if x + item_w > width - 16 and x > 16:
            x, y = 16.0, y + 18
        if key.is_bar:
            parts.append(
                f'<rect x="{num(x)}" y="{num(y - 10)}" width="12" height="12" rx="2" '
                f'fill="{key.color}"/>'
            )
        else:
            style = f' stroke-width="2.5"{dash_attr(key.dash)}'
            parts.append(line(x, y - 4, x + 22, y - 4, stroke=key.color, extra=style))
        parts.append(text(x + (18 if key.is_bar else 28), y, key.name, fill=INK))
        x += item_w
    return parts, y - top + 8


def grid_y(axis: Axis, box: Box) -> list[str]:
    """Horizontal gridlines with value labels left of the plot."""
    parts = []
    for tick, label in zip(axis.ticks, axis.labels(), strict=True):
        y = box.y(axis.fraction(tick))
        color = AXIS if tick == 0 else GRID
        parts.append(line(box.left, y, box.right, y, stroke=color))
        parts.append(text(box.left - 8, y + 4, label, anchor="end"))
    return parts


def grid_x(axis: Axis, box: Box) -> list[str]:
    """Vertical gridlines (minor ones fainter) with value labels under the plot."""
    parts = []
    for tick in axis.minor_ticks:
        x = box.x(axis.fraction(tick))
        parts.append(line(x, box.top, x, box.bottom, stroke="#f3f3f3"))
    for tick, label in zip(axis.ticks, axis.labels(), strict=True):
        x = box.x(axis.fraction(tick))
        color = AXIS if tick == 0 and not axis.log else GRID
        parts.append(line(x, box.top, x, box.bottom, stroke=color))
        parts.append(text(x, box.bottom + 18, label, anchor="middle"))
    return parts


def axis_titles(box: Box, x_label: str, y_label: str, x_label_y: float) -> list[str]:
    """The baseline under the plot, the x title centred at ``x_label_y`` and the y title
    rotated along the left edge."""
    mid_x, mid_y = (box.left + box.right) / 2, (box.top + box.bottom) / 2
    x_title = fit(x_label, box.right - box.left, 13)
    y_title = fit(y_label, box.bottom - box.top, 13)
    turn = f' transform="rotate(-90 20 {num(mid_y)})"'
    return [
        line(box.left, box.bottom, box.right, box.bottom, stroke=AXIS),
        text(mid_x, x_label_y, x_title, size=13, anchor="middle", fill="#444444"),
        text(20, mid_y, y_title, size=13, anchor="middle", fill="#444444", extra=turn),
    ]
