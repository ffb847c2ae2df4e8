"""The SVG drawing pieces: coordinates in the box, escaped text, legends that flow, stable ids."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from kvroute.report.charts.axes import linear_axis
from kvroute.report.charts.canvas import (
    Box,
    Dash,
    LegendKey,
    clip_id,
    fit,
    grid_y,
    legend,
    line,
    num,
    svg_open,
    text,
)

BOX = Box(left=50, top=20, right=450, bottom=220)


def test_box_maps_fractions_with_y_growing_up() -> None:
    assert (BOX.x(0.0), BOX.x(1.0), BOX.x(0.25)) == (50, 450, 150)
    assert (BOX.y(0.0), BOX.y(1.0), BOX.y(0.5)) == (220, 20, 120)


def test_coordinates_print_one_decimal_without_a_trailing_zero() -> None:
    assert (num(3.0), num(3.14159), num(-0.25)) == ("3", "3.1", "-0.2")
    assert (
        line(0, 1.5, 2.04, 3, stroke="#000")
        == '<line x1="0" y1="1.5" x2="2" y2="3" stroke="#000"/>'
    )


def test_text_is_escaped_and_its_tooltip_too() -> None:
    svg = text(1, 2, "a < b & c", tooltip='"quoted"')
    element = ET.fromstring(svg)
    assert "".join(element.itertext()) == '"quoted"a < b & c'
    assert element.find("title") is not None


def test_fit_cuts_long_text_with_an_ellipsis_and_keeps_short_text() -> None:
    assert fit("short", 200, 12) == "short"
    cut = fit("a" * 100, 70, 12)
    assert cut.endswith("…") and len(cut) == int(70 / (12 * 0.58))


def test_svg_open_is_sized_titled_and_closes_into_valid_xml() -> None:
    parts = svg_open(600, 300.0, "Hit <ratio>")
    root = ET.fromstring("".join([*parts, "</svg>"]))
    assert root.get("viewBox") == "0 0 600 300" and root.get("aria-label") == "Hit <ratio>"
    assert "Hit <ratio>" in "".join(root.itertext())


def test_legend_is_empty_for_one_series_and_wraps_rows_that_do_not_fit() -> None:
    one = [LegendKey("only", "#000", Dash.SOLID, is_bar=False)]
    assert legend(one, 600, 30) == ([], 0.0)
    keys = [
        LegendKey(f"series number {i}", "#000", Dash.DASHED, is_bar=i % 2 == 0) for i in range(6)
    ]
    narrow_parts, narrow_h = legend(keys, 300, 30)
    _, wide_h = legend(keys, 2000, 30)
    assert narrow_h > wide_h  # more rows when narrow
    body = "".join(narrow_parts)
    assert all(f"series number {i}" in body for i in range(6))
    assert body.count("<rect") == 3 and body.count('stroke-dasharray="7 4"') == 3


def test_grid_y_labels_every_tick_at_its_height() -> None:
    axis = linear_axis([0.0, 100.0])
    parts = grid_y(axis, BOX)
    labels = [p for p in parts if p.startswith("<text")]
    assert [ET.fromstring(p).text for p in labels] == list(axis.labels())
    ys = [float(re.search(r' y1="([\d.]+)"', p).group(1)) for p in parts if p.startswith("<line")]  # type: ignore[union-attr]
    assert ys[0] == BOX.bottom and ys[-1] == BOX.top  # 0 at the bottom, 100 at the top


def test_clip_ids_are_stable_and_differ_between_charts() -> None:
    assert clip_id("a", 1) == clip_id("a", 1)
    assert clip_id("a", 1) != clip_id("a", 2)
    assert re.fullmatch(r"kvc[0-9a-f]{12}", clip_id("x"))
