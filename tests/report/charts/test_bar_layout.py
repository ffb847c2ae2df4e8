"""Bar placement: each bar's length is its value on the axis, from zero, in either direction."""

from __future__ import annotations

import math
import re

from kvroute.report.charts.axes import linear_axis
from kvroute.report.charts.bar_layout import horizontal_bars, vertical_bars

_RECT = re.compile(
    r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)"[^>]*><title>([^<]*)</title>'
)


def bars(parts: list[str]) -> list[tuple[float, float, float, float, str]]:
    found = [_RECT.search(p) for p in parts]
    return [(float(m[1]), float(m[2]), float(m[3]), float(m[4]), m[5]) for m in found if m]


def test_vertical_bars_are_as_tall_as_their_values() -> None:
    axis = linear_axis([0.0, 40.0], include_zero=True)
    parts, box, height = vertical_bars(
        ["a", "b"], [("hits", [10.0, 40.0])], axis, width=600, height=300, top=40
    )
    (_, y_a, _, h_a, tip_a), (_, y_b, _, h_b, tip_b) = bars(parts)
    assert math.isclose(y_b, box.top, abs_tol=0.1)  # the tallest reaches the top
    plot_h = box.bottom - box.top
    assert math.isclose(h_a, plot_h / 4, abs_tol=0.1) and math.isclose(h_b, plot_h, abs_tol=0.1)
    assert math.isclose(y_a + h_a, box.bottom, abs_tol=0.1)  # both stand on zero
    assert (tip_a, tip_b) == ("a · hits: 10", "b · hits: 40")
    assert height == 300  # short labels lie flat: no extra depth


def test_vertical_bars_of_two_groups_sit_side_by_side_in_their_category() -> None:
    axis = linear_axis([0.0, 1.0], include_zero=True)
    parts, _, _ = vertical_bars(
        ["x"], [("one", [1.0]), ("two", [0.5])], axis, width=400, height=300, top=40
    )
    (x1, _, w1, _, _), (x2, _, _, _, _) = bars(parts)
    assert math.isclose(x2, x1 + w1, abs_tol=0.1)


def test_long_labels_rotate_and_the_chart_grows_to_hold_them() -> None:
    axis = linear_axis([0.0, 1.0], include_zero=True)
    labels = [f"a rather long category label {i}" for i in range(8)]
    parts, _, height = vertical_bars(
        labels, [("v", [0.5] * 8)], axis, width=400, height=300, top=40
    )
    assert height > 300 and any("rotate(-40" in p for p in parts)


def test_horizontal_bars_print_their_values_and_negative_ones_point_left() -> None:
    axis = linear_axis([-20.0, 60.0], include_zero=True)
    parts, box, _ = horizontal_bars(
        ["gain", "loss"], [("change", [60.0, -20.0])], axis, width=600, height=200, top=40
    )
    (x_gain, _, w_gain, _, _), (x_loss, _, w_loss, _, _) = bars(parts)
    zero_x = box.x(axis.fraction(0.0))
    assert math.isclose(x_gain, zero_x, abs_tol=0.1)  # grows right from zero
    assert math.isclose(x_loss + w_loss, zero_x, abs_tol=0.1)  # grows left to zero
    assert math.isclose(w_gain, 3 * w_loss, abs_tol=0.2)
    body = "".join(parts)
    assert ">60</text>" in body and ">-20</text>" in body


def test_a_non_finite_value_draws_no_bar_and_the_others_stay() -> None:
    axis = linear_axis([0.0, 10.0], include_zero=True)
    for layout in (vertical_bars, horizontal_bars):
        parts, _, _ = layout(
            ["a", "b", "c"], [("v", [5.0, math.nan, math.inf])], axis, width=600, height=300, top=40
        )
        assert [tip for *_, tip in bars(parts)] == ["a · v: 5"]
