"""Inline SVG charts for self-contained reports: line charts, bar charts and histograms.

Every function here is pure and deterministic (same input, same bytes) and returns one
complete ``<svg>`` element that parses as XML. All text is escaped. Charts scale to their
container through ``viewBox``; colours come from the Okabe–Ito colour-blind-safe palette,
and a line's dash pattern can tell series apart in greyscale print. Hover tooltips are SVG
``<title>`` elements, so no JavaScript is needed.

Bad data never raises: points with a NaN or infinite coordinate (and, on a log x axis,
x <= 0) are skipped, and a chart with nothing left to draw is a "no data" placeholder with
the same title and size. Programming errors (mismatched lengths) raise ``ValueError``.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvroute.report.charts.axes import Axis, linear_axis, log_axis
from kvroute.report.charts.bar_layout import horizontal_bars, vertical_bars
from kvroute.report.charts.canvas import (
    AXIS,
    PALETTE,
    Box,
    Dash,
    LegendKey,
    axis_titles,
    clip_id,
    dash_attr,
    grid_x,
    grid_y,
    legend,
    line,
    num,
    svg_open,
    text,
    text_width,
)
from kvroute.report.fmt import si
from kvroute.report.page.escape import escape

__all__ = [
    "PALETTE",
    "Bars",
    "Dash",
    "RefLine",
    "Series",
    "Shape",
    "bar_chart",
    "bin_labels",
    "histogram",
    "line_chart",
    "no_data",
]

_MAX_MARKERS = 40  # series with at most this many points get hoverable point markers
_REF = "#444444"


class Shape(enum.Enum):
    """How consecutive points are joined."""

    LINEAR = "linear"
    STEP = "step"
    """Horizontal then vertical (step-after): the honest shape for an empirical CDF."""


@dataclass(frozen=True, slots=True)
class Series:
    """One named line; ``xs[i]`` pairs with ``ys[i]``, drawn in the given order."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    dash: Dash = Dash.SOLID
    shape: Shape = Shape.LINEAR

    def __post_init__(self) -> None:
        if len(self.xs) != len(self.ys):
            raise ValueError(f"series {self.name!r}: {len(self.xs)} xs but {len(self.ys)} ys")
        object.__setattr__(self, "xs", tuple(float(x) for x in self.xs))
        object.__setattr__(self, "ys", tuple(float(y) for y in self.ys))


@dataclass(frozen=True, slots=True)
class RefLine:
    """A labelled reference line at ``value`` (a y value for hlines, an x value for vlines)."""

    value: float
    label: str = ""
    dash: Dash = Dash.DASHED


@dataclass(frozen=True, slots=True)
class Bars:
    """One named series of bar values, one per category label."""

    name: str
    values: Sequence[float]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))


def no_data(title: str, *, width: int = 720, height: int = 360, message: str = "no data") -> str:
    """A placeholder chart: the title and a framed ``message`` where the plot would be."""
    parts = svg_open(width, height, title)
    parts.append(
        f'<rect x="16" y="40" width="{width - 32}" height="{height - 56}" fill="none" '
        f'stroke="{AXIS}" stroke-dasharray="4 4"/>'
    )
    parts.append(text(width / 2, 40 + (height - 56) / 2, message, size=14, anchor="middle"))
    return "\n".join([*parts, "</svg>"])


def _runs(series: Series, log_x: bool) -> list[list[tuple[float, float]]]:
    """The drawable points of ``series``, split into runs wherever a point is skipped, so
    a gap in the data shows as a gap in the line."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(series.xs, series.ys, strict=True):
        if math.isfinite(x) and math.isfinite(y) and (x > 0 or not log_x):
            runs[-1].append((x, y))
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _path(runs: Sequence[Sequence[tuple[float, float]]], shape: Shape) -> str:
    """SVG path data through each run of pixel points; a step path goes across, then up or
    down. Points that land on the previous one at 0.1 px resolution are dropped, so a
    100k-point CDF costs a few thousand segments, not 100k."""
    out = []
    for run in runs:
        last = (num(run[0][0]), num(run[0][1]))
        out.append(f"M{last[0]} {last[1]}")
        for x, y in run[1:]:
            here = (num(x), num(y))
            if shape is Shape.LINEAR and here != last:
                out.append(f"L{here[0]} {here[1]}")
            elif shape is Shape.STEP:
                out.append(f"H{here[0]}" if here[0] != last[0] else "")
                out.append(f"V{here[1]}" if here[1] != last[1] else "")
            last = here
    return "".join(out)


def _series(
    one: Series,
    runs: Sequence[Sequence[tuple[float, float]]],
    color: str,
    project: Callable[[float, float], tuple[float, float]],
    *,
    describe: str,
    axes: tuple[Axis, Axis],
    below: int = 0,
) -> list[str]:
    """One series' path (and, for short series, markers whose tooltips fill ``describe``).

    ``below``: how many series are drawn over this one. Each layer down is drawn wider,
    so a series lying exactly under a later one still shows as a rim of its colour
    (vLLM's curve under SGLang's in a sweep where they agree)."""
    if not runs:
        return []
    pixel_runs = [[project(x, y) for x, y in run] for run in runs]
    stroke_w = min(2.2 + 1.2 * below, 6.0)
    radius = min(3.2 + 1.0 * below, 6.0)
    parts = [
        f'<path d="{_path(pixel_runs, one.shape)}" fill="none" stroke="{color}" '
        f'stroke-width="{num(stroke_w)}" stroke-linejoin="round"{dash_attr(one.dash)}/>'
    ]
    points = [p for run in runs for p in run]
    if len(points) <= _MAX_MARKERS:
        for x, y in points:
            cx, cy = project(x, y)
            tip = describe.format(axes[0].format(x), axes[1].format(y))
            parts.append(
                f'<circle cx="{num(cx)}" cy="{num(cy)}" r="{num(radius)}" fill="{color}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    return parts


def _ref_lines(
    hlines: Sequence[RefLine], vlines: Sequence[RefLine], x_axis: Axis, y_axis: Axis, box: Box
) -> list[str]:
    """Reference lines inside the axes' ranges; hline labels sit on the line (on a white
    halo), vline labels above the plot, where data cannot hide them."""
    parts = []
    halo = ' stroke="#ffffff" stroke-width="3" paint-order="stroke"'
    for ref in hlines:
        if math.isfinite(ref.value) and 0 <= y_axis.fraction(ref.value) <= 1:
            y = box.y(y_axis.fraction(ref.value))
            parts.append(line(box.left, y, box.right, y, stroke=_REF, extra=dash_attr(ref.dash)))
            label = text(box.right - 4, y - 5, ref.label, size=11, anchor="end", extra=halo)
            parts.append(label)
    for ref in vlines:
        ok = math.isfinite(ref.value) and (ref.value > 0 or not x_axis.log)
        if ok and 0 <= x_axis.fraction(ref.value) <= 1:
            x = box.x(x_axis.fraction(ref.value))
            parts.append(line(x, box.top, x, box.bottom, stroke=_REF, extra=dash_attr(ref.dash)))
            half = text_width(ref.label, 11) / 2
            label_x = min(max(x, box.left + half), box.right - half)
            parts.append(text(label_x, box.top - 6, ref.label, size=11, anchor="middle"))
    return parts


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    y_min: float | None = None,
    y_max: float | None = None,
    percent_y: bool = False,
    hlines: Sequence[RefLine] = (),
    vlines: Sequence[RefLine] = (),
    width: int = 720,
    height: int = 360,
) -> str:
    """A line chart of ``series`` over a shared x axis (base-10 log when ``log_x``).

    The y axis includes zero and extends to round ticks unless ``y_min`` / ``y_max`` fix an
    end (lines are clipped to fixed ends). ``percent_y`` means y values are fractions,
    labelled as percentages. Reference lines widen the axes so they stay visible. Series
    with at most 40 points get markers whose tooltips give the exact values.
    Raises ``ValueError`` if ``y_min >= y_max``.
    """
    all_runs = [_runs(one, log_x) for one in series]
    points = [p for runs in all_runs for run in runs for p in run]
    if not points:
        return no_data(title, width=width, height=height)
    xs = [x for x, _ in points] + [
        r.value for r in vlines if math.isfinite(r.value) and (r.value > 0 or not log_x)
    ]
    ys = [y for _, y in points] + [r.value for r in hlines if math.isfinite(r.value)]
    x_axis = log_axis(xs) if log_x else linear_axis(xs, max_ticks=8)
    y_axis = linear_axis(ys, include_zero=True, fixed_lo=y_min, fixed_hi=y_max, percent=percent_y)
    keys = [
        LegendKey(one.name, PALETTE[i % len(PALETTE)], one.dash, False)
        for i, one in enumerate(series)
    ]
    legend_parts, legend_h = legend(keys, width, 32)
    left = 40 + max(text_width(label, 12) for label in y_axis.labels())
    top = 44 + legend_h + (16 if any(r.label for r in vlines) else 0)
    box = Box(left, top, width - 28, height - 52)
    clip = clip_id(series, title, log_x, y_min, y_max, percent_y, width, height)
    parts = [*svg_open(width, height, title), *legend_parts, *grid_y(y_axis, box)]
    parts += grid_x(x_axis, box)
    parts += axis_titles(box, x_label, y_label, height - 14)
    parts.append(
        f'<defs><clipPath id="{clip}"><rect x="{num(box.left - 4)}" y="{num(box.top - 4)}" '
        f'width="{num(box.right - box.left + 8)}" height="{num(box.bottom - box.top + 8)}"/>'
        f'</clipPath></defs><g clip-path="url(#{clip})">'
    )

    def project(x: float, y: float) -> tuple[float, float]:
        return box.x(x_axis.fraction(x)), box.y(y_axis.fraction(y))

    drawn = [(key, one, runs) for key, one, runs in zip(keys, series, all_runs, strict=True)]
    for layer, (key, one, runs) in enumerate(drawn):
        describe = f"{one.name}: {x_label} {{}}, {y_label} {{}}"
        parts += _series(
            one,
            runs,
            key.color,
            project,
            describe=describe,
            axes=(x_axis, y_axis),
            below=sum(1 for _, _, r in drawn[layer + 1 :] if r),
        )
    parts.append("</g>")
    parts += _ref_lines(hlines, vlines, x_axis, y_axis, box)
    return "\n".join([*parts, "</svg>"])


def _as_bars(values: Sequence[float] | Sequence[Bars], num_labels: int) -> list[Bars]:
    groups = [v for v in values if isinstance(v, Bars)]
    if not groups:
        groups = [Bars("", [v for v in values if not isinstance(v, Bars)])]
    elif len(groups) != len(values):
        raise ValueError("bar values must be all floats or all Bars, not a mix")
    for group in groups:
        if len(group.values) != num_labels:
            raise ValueError(
                f"bars {group.name!r}: {len(group.values)} values for {num_labels} labels"
            )
    return groups


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float] | Sequence[Bars],
    *,
    title: str,
    x_label: str,
    y_label: str,
    horizontal: bool = False,
    percent: bool = False,
    width: int = 720,
    height: int = 360,
) -> str:
    """Bars for each category in ``labels``: one series (plain floats) or grouped ``Bars``.

    ``x_label`` names the categories and ``y_label`` the values, in either orientation.
    ``horizontal`` lays categories top to bottom with each value printed at its bar's end
    (best for top-N lists; ``height`` then grows with the number of categories). ``percent``
    means values are fractions, labelled as percentages. Non-finite values draw no bar.
    Empty ``labels`` or ``values`` draw "no data". Raises ``ValueError`` if a series'
    length differs from ``len(labels)`` or floats and ``Bars`` are mixed.
    """
    groups = _as_bars(values, len(labels)) if len(labels) and len(values) else []
    finite = [v for g in groups for v in g.values if math.isfinite(v)]
    if not finite:
        return no_data(title, width=width, height=height)
    axis = linear_axis(finite, include_zero=True, percent=percent)
    keys = [
        LegendKey(g.name, PALETTE[i % len(PALETTE)], Dash.SOLID, True) for i, g in enumerate(groups)
    ]
    legend_parts, legend_h = legend(keys, width, 32)
    draw = horizontal_bars if horizontal else vertical_bars
    named = [(g.name, g.values) for g in groups]
    body, box, total_h = draw(labels, named, axis, width=width, height=height, top=44 + legend_h)
    parts = svg_open(width, total_h, title) + legend_parts + body
    parts += axis_titles(
        box, y_label if horizontal else x_label, x_label if horizontal else y_label, total_h - 14
    )
    return "\n".join([*parts, "</svg>"])


def bin_labels(edges: Sequence[float], edge_text: Callable[[float], str] = si) -> tuple[str, ...]:
    """Labels for the bins between consecutive ``edges``: ``"1k–2k"``, ``"≥ 8k"`` (open
    end); ``edge_text`` writes one edge (:func:`~kvroute.report.fmt.duration` for times)."""
    out = []
    for lo, hi in itertools.pairwise(edges):
        if math.isinf(hi) and hi > 0:
            out.append(f"≥ {edge_text(lo)}")
        elif math.isinf(lo) and lo < 0:
            out.append(f"< {edge_text(hi)}")
        else:
            out.append(f"{edge_text(lo)}–{edge_text(hi)}")
    return tuple(out)


def histogram(
    edges: Sequence[float],
    counts: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str = "count",
    percent: bool = False,
    edge_text: Callable[[float], str] = si,
    width: int = 720,
    height: int = 360,
) -> str:
    """A histogram from bin ``edges`` (``len(counts) + 1`` of them) and per-bin ``counts``.

    Bins are drawn as equal-width bars labelled by their range, so log-spaced bins read
    well. ``percent`` means counts are fractions of the total. Raises ``ValueError`` if
    ``len(edges) != len(counts) + 1`` (unless both are empty, which draws "no data").
    """
    if (len(edges) or len(counts)) and len(edges) != len(counts) + 1:
        raise ValueError(
            f"histogram needs len(counts) + 1 edges, got {len(edges)} edges "
            f"for {len(counts)} counts"
        )
    return bar_chart(
        bin_labels(edges, edge_text),
        list(counts),
        title=title,
        x_label=x_label,
        y_label=y_label,
        percent=percent,
        width=width,
        height=height,
    )
