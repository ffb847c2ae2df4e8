"""SVG charts: well-formed XML, escaped text, round ticks, graceful bad data."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import cast

import pytest

from kvroute.report.charts.svg import (
    PALETTE,
    Bars,
    Dash,
    RefLine,
    Series,
    Shape,
    bar_chart,
    bin_labels,
    histogram,
    line_chart,
    no_data,
)

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert('x')</script> & \"quoted\" \x01"
HOSTILE_CLEAN = "<script>alert('x')</script> & \"quoted\" "  # control character dropped


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def texts(svg: str) -> list[str]:
    """Visible text of every <text> element (hover <title> children excluded)."""
    return [
        (el.text or "") + "".join(child.tail or "" for child in el)
        for el in parse(svg).iter(f"{NS}text")
    ]


def tooltips(svg: str) -> list[str]:
    return [el.text or "" for el in parse(svg).iter(f"{NS}title")]


def _line(*, log_x: bool = False, y_min: float | None = None, y_max: float | None = None) -> str:
    return line_chart(
        [Series("a", [1, 2, 3], [0.1, 0.5, 0.9])],
        title="t",
        x_label="x",
        y_label="y",
        log_x=log_x,
        y_min=y_min,
        y_max=y_max,
    )


CHARTS: dict[str, Callable[[], str]] = {
    "line": _line,
    "line log x with zeros": lambda: line_chart(
        [Series("c", [0, 10, 100, 1000], [0, 0.2, 0.5, 0.7])],
        title="t",
        x_label="capacity (tokens)",
        y_label="hit",
        log_x=True,
        percent_y=True,
    ),
    "line step dashed refs": lambda: line_chart(
        [
            Series("cdf", [1, 5, 9], [0.2, 0.6, 1.0], shape=Shape.STEP),
            Series("b", [1, 9], [0, 1], dash=Dash.DOTTED),
        ],
        title="t",
        x_label="x",
        y_label="y",
        hlines=[RefLine(0.5, "median")],
        vlines=[RefLine(4, "cut")],
        y_min=0,
        y_max=1,
    ),
    "line empty": lambda: line_chart([], title="t", x_label="x", y_label="y"),
    "line all nan": lambda: line_chart(
        [Series("n", [math.nan, 1], [1, math.inf])], title="t", x_label="x", y_label="y"
    ),
    "line single point": lambda: line_chart(
        [Series("one", [3], [7])], title="t", x_label="x", y_label="y"
    ),
    "line all zero": lambda: line_chart(
        [Series("z", [0, 1, 2], [0, 0, 0])], title="t", x_label="x", y_label="y"
    ),
    "line huge": lambda: line_chart(
        [Series("h", [1, 2], [1.2e9, 3.4e12])], title="t", x_label="x", y_label="bytes"
    ),
    "bar": lambda: bar_chart(["a", "b"], [1, 2], title="t", x_label="x", y_label="y"),
    "bar grouped horizontal percent": lambda: bar_chart(
        ["a", "b"],
        [Bars("one", [0.1, 0.2]), Bars("two", [0.3, math.nan])],
        title="t",
        x_label="group",
        y_label="share",
        horizontal=True,
        percent=True,
    ),
    "bar negative": lambda: bar_chart(
        ["a", "b"], [-1, 2], title="t", x_label="x", y_label="y", horizontal=True
    ),
    "bar many long labels": lambda: bar_chart(
        [f"a rather long category label {i}" for i in range(60)],
        list(range(60)),
        title="t",
        x_label="x",
        y_label="y",
    ),
    "bar empty": lambda: bar_chart([], [], title="t", x_label="x", y_label="y"),
    "bar all zero": lambda: bar_chart(["a"], [0], title="t", x_label="x", y_label="y"),
    "histogram": lambda: histogram(
        [0, 128, 1024, math.inf], [5, 10, 1], title="t", x_label="tokens"
    ),
    "histogram empty": lambda: histogram([], [], title="t", x_label="tokens"),
    "no data": lambda: no_data("t"),
}


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_every_chart_is_valid_responsive_svg(name: str) -> None:
    svg = CHARTS[name]()
    root = parse(svg)
    assert re.fullmatch(r"0 0 \d+ [\d.]+", root.attrib["viewBox"])
    assert "t" in texts(svg)  # the title is drawn
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", svg)
    assert "<script" not in svg
    assert svg == CHARTS[name]()  # deterministic


@pytest.mark.parametrize(
    "name", ["line empty", "line all nan", "bar empty", "histogram empty", "no data"]
)
def test_nothing_to_draw_gives_placeholder(name: str) -> None:
    assert "no data" in texts(CHARTS[name]())


def test_hostile_strings_are_escaped_everywhere() -> None:
    charts = [
        line_chart(
            [Series(HOSTILE, [1, 2], [1, 2])],
            title=HOSTILE,
            x_label=HOSTILE,
            y_label=HOSTILE,
            hlines=[RefLine(1.5, HOSTILE)],
            vlines=[RefLine(1.5, HOSTILE)],
        ),
        bar_chart(
            [HOSTILE, "b"],
            [Bars(HOSTILE, [1, 2]), Bars("x", [2, 1])],
            title=HOSTILE,
            x_label=HOSTILE,
            y_label=HOSTILE,
            horizontal=True,
        ),
        bar_chart([HOSTILE], [1], title=HOSTILE, x_label="x", y_label="y"),
        no_data(HOSTILE, message=HOSTILE),
    ]
    for svg in charts:
        root = parse(svg)
        assert "<script>" not in svg and "\x01" not in svg
        assert root.attrib["aria-label"] == HOSTILE_CLEAN
        shown = texts(svg) + tooltips(svg)
        assert any(HOSTILE_CLEAN in s for s in shown)


def test_linear_tick_labels_are_round_and_cover_data() -> None:
    svg = line_chart(
        [Series("s", [0, 50, 100], [3, 512, 1030])], title="t", x_label="x", y_label="y"
    )
    labels = texts(svg)
    for expected in ["0", "200", "400", "600", "800", "1k", "1.2k"]:  # y covers 0..1030
        assert expected in labels
    for expected in ["0", "20", "40", "60", "80", "100"]:  # x
        assert expected in labels


def test_log_axis_labels_powers_of_ten_and_skips_nonpositive_x() -> None:
    svg = CHARTS["line log x with zeros"]()
    labels = set(texts(svg))
    assert {"10", "100", "1k"} <= labels
    assert not labels & {"0", "20", "50", "500"}  # no linear or minor-tick labels
    # x = 0 cannot sit on a log axis: three markers for four points.
    assert len(list(parse(svg).iter(f"{NS}circle"))) == 3


def test_percent_axis_labels() -> None:
    labels = texts(CHARTS["line log x with zeros"]())
    assert "0 %" in labels and "80 %" in labels


def test_si_labels_for_huge_values() -> None:
    labels = texts(CHARTS["line huge"]())
    assert any(re.fullmatch(r"\d+(\.\d+)?T", s) for s in labels)


def test_all_zero_axis_runs_from_zero_up() -> None:
    for name in ("line all zero", "bar all zero"):
        labels = texts(CHARTS[name]())
        assert "0" in labels and "1" in labels
        assert not any(s.startswith("-") for s in labels)


def test_single_point_draws_a_marker() -> None:
    circles = list(parse(CHARTS["line single point"]()).iter(f"{NS}circle"))
    assert len(circles) == 1
    assert "one: x 3, y 7" in tooltips(CHARTS["line single point"]())


def test_nan_breaks_the_line_instead_of_bridging_it() -> None:
    svg = line_chart(
        [Series("g", [1, 2, 3, 4, 5], [1, 2, math.nan, 4, 5])],
        title="t",
        x_label="x",
        y_label="y",
    )
    (path,) = parse(svg).iter(f"{NS}path")
    assert path.attrib["d"].count("M") == 2


def test_step_shape_uses_horizontal_then_vertical_moves() -> None:
    svg = CHARTS["line step dashed refs"]()
    first = next(parse(svg).iter(f"{NS}path"))
    assert "H" in first.attrib["d"] and "V" in first.attrib["d"]
    assert "L" not in first.attrib["d"]


def test_reference_lines_and_legend() -> None:
    svg = CHARTS["line step dashed refs"]()
    labels = texts(svg)
    assert {"median", "cut", "cdf", "b"} <= set(labels)
    strokes = [el.attrib.get("stroke") for el in parse(svg).iter(f"{NS}path")]
    assert strokes == [PALETTE[0], PALETTE[1]]


def test_series_beyond_fixed_bounds_are_clipped() -> None:
    svg = line_chart(
        [Series("s", [0, 1], [0, 5])], title="t", x_label="x", y_label="y", y_min=0, y_max=1
    )
    root = parse(svg)
    clip_ids = [el.attrib["id"] for el in root.iter(f"{NS}clipPath")]
    assert len(clip_ids) == 1
    assert any(el.attrib.get("clip-path") == f"url(#{clip_ids[0]})" for el in root.iter())
    assert "5" not in texts(svg)


def test_clip_ids_differ_between_charts() -> None:
    a, b = _line(), _line(log_x=True)
    id_a = re.search(r'clipPath id="([^"]+)"', a)
    id_b = re.search(r'clipPath id="([^"]+)"', b)
    assert id_a and id_b and id_a.group(1) != id_b.group(1)


def test_horizontal_bars_print_values() -> None:
    labels = texts(CHARTS["bar grouped horizontal percent"]())
    assert {"10 %", "20 %", "30 %"} <= set(labels)
    assert {"one", "two"} <= set(labels)  # legend for grouped bars


def test_bar_tooltips_name_category_series_and_value() -> None:
    tips = tooltips(CHARTS["bar grouped horizontal percent"]())
    assert "a · one: 10.0 %" in tips  # the tables' precision (fmt.percent)


def test_long_vertical_labels_are_truncated_thinned_and_keep_full_text_on_hover() -> None:
    svg = CHARTS["bar many long labels"]()
    labels = [s for s in texts(svg) if s.startswith("a rather")]
    assert 0 < len(labels) < 60
    assert "a rather long category label 0" in tooltips(svg)


def test_histogram_bin_labels() -> None:
    assert bin_labels([0, 1000, 2500, math.inf]) == ("0–1k", "1k–2.5k", "≥ 2.5k")
    assert bin_labels([-math.inf, 0, 1]) == ("< 0", "0–1")
    labels = texts(CHARTS["histogram"]())
    assert {"0–128", "128–1.02k", "≥ 1.02k"} <= set(labels)


def test_programming_errors_raise() -> None:
    with pytest.raises(ValueError, match="xs"):
        Series("bad", [1, 2], [1])
    with pytest.raises(ValueError, match="labels"):
        bar_chart(["a", "b"], [1], title="t", x_label="x", y_label="y")
    with pytest.raises(ValueError, match="mix"):
        mixed = cast(list[float], [Bars("a", [1]), 2.0])
        bar_chart(["a"], mixed, title="t", x_label="x", y_label="y")
    with pytest.raises(ValueError, match="edges"):
        histogram([0, 1], [1, 2], title="t", x_label="x")
    with pytest.raises(ValueError):
        _line(y_min=1, y_max=0)


def test_series_is_immutable_and_takes_any_sequence() -> None:
    xs = [1.0, 2.0]
    series = Series("s", xs, range(2))
    xs.append(3.0)
    assert series.xs == (1.0, 2.0) and series.ys == (0.0, 1.0)


def test_dense_series_stay_small() -> None:
    n = 100_000
    svg = line_chart(
        [Series("cdf", range(n), [(i + 1) / n for i in range(n)], shape=Shape.STEP)],
        title="t",
        x_label="x",
        y_label="y",
    )
    parse(svg)
    assert len(svg) < 150_000


def test_a_series_lying_under_a_later_one_is_drawn_wider_so_it_stays_visible() -> None:
    same = [1.0, 2.0, 3.0]
    svg = line_chart(
        [Series("vllm", same, same), Series("sglang", same, same)],
        title="t",
        x_label="x",
        y_label="y",
    )
    widths = [
        float(w)
        for w in re.findall(
            r'<path d="[^"]*" fill="none" stroke="[^"]*" stroke-width="([0-9.]+)"', svg
        )
    ]
    assert len(widths) == 2 and widths[0] > widths[1]
