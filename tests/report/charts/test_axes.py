"""Tick values are round, cover the data, and log ticks are powers of ten."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvroute.report.charts.axes import linear_axis, log_axis, log_ticks, nice_ticks, tick_labels


def _round_step(step: float, tol: float) -> float | None:
    """``step`` snapped to the 1, 2, 2.5 or 5 times a power of ten it approximates."""
    exponent = math.floor(math.log10(step))
    for mantissa in (0.5, 1, 2, 2.5, 5, 10):
        candidate = mantissa * 10.0**exponent
        if math.isclose(step, candidate, rel_tol=1e-9, abs_tol=tol):
            return candidate
    return None


@given(
    st.floats(min_value=-1e9, max_value=1e9),
    st.floats(min_value=0, max_value=1e9),
    st.integers(min_value=2, max_value=10),
)
def test_nice_ticks_are_round_and_cover(lo: float, span: float, max_ticks: int) -> None:
    hi = lo + span
    ticks = nice_ticks(lo, hi, max_ticks=max_ticks)
    assert 2 <= len(ticks) <= max_ticks + 1
    # Tick values are floats: allow a few units in the last place of the largest one.
    tol = 4 * math.ulp(max(abs(ticks[0]), abs(ticks[-1])))
    steps = [b - a for a, b in itertools.pairwise(ticks)]
    slack = tol + steps[0] * 1e-9  # documented: ends may miss by a billionth of a step
    assert ticks[0] <= lo + slack and ticks[-1] >= hi - slack
    assert all(math.isclose(s, steps[0], rel_tol=1e-9, abs_tol=tol) for s in steps)
    step = _round_step(steps[0], tol)
    assert step is not None
    assert all(abs(t - round(t / step) * step) <= tol for t in ticks)


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0, 1030, (0, 200, 400, 600, 800, 1000, 1200)),
        (0.013, 0.97, (0, 0.2, 0.4, 0.6, 0.8, 1.0)),
        (0.1, 0.3, (0.1, 0.15, 0.2, 0.25, 0.3)),
        (0, 0, (0, 0.2, 0.4, 0.6, 0.8, 1.0)),
        (-3, 7, (-4, -2, 0, 2, 4, 6, 8)),
    ],
)
def test_nice_ticks_examples(lo: float, hi: float, expected: tuple[float, ...]) -> None:
    assert nice_ticks(lo, hi) == expected


def test_nice_ticks_rejects_bad_ranges() -> None:
    for lo, hi in ((1, 0), (math.nan, 1), (0, math.inf)):
        with pytest.raises(ValueError):
            nice_ticks(lo, hi)


@given(st.floats(min_value=1e-6, max_value=1e12), st.floats(min_value=1, max_value=1e6))
def test_log_ticks_are_powers_of_ten_covering(lo: float, ratio: float) -> None:
    hi = lo * ratio
    ticks = log_ticks(lo, hi)
    assert ticks[0] <= lo * (1 + 1e-9) and ticks[-1] >= hi * (1 - 1e-9)
    for t in ticks:
        assert math.isclose(math.log10(t), round(math.log10(t)), abs_tol=1e-9)


def test_log_ticks_thin_out_many_decades() -> None:
    ticks = log_ticks(1e-3, 1e12, max_ticks=8)
    assert len(ticks) <= 9
    assert ticks[0] == 1e-3 and ticks[-1] >= 1e12


def test_log_axis_snaps_to_nearby_round_values() -> None:
    axis = log_axis([1024, 4096, 1_048_576])
    assert (axis.lo, axis.hi) == (1000, 2_000_000)
    assert axis.ticks == (1e3, 1e4, 1e5, 1e6)
    assert axis.labels() == ("1k", "10k", "100k", "1M")
    assert 2e6 in axis.minor_ticks and 5e5 in axis.minor_ticks
    assert all(axis.lo <= m <= axis.hi for m in axis.minor_ticks)


def test_log_axis_narrow_range_widens_to_decades() -> None:
    axis = log_axis([300, 400])
    assert axis.ticks == (100, 1000)
    single = log_axis([100])
    assert single.lo < 100 < single.hi


def test_linear_axis_all_zero_goes_up_not_down() -> None:
    axis = linear_axis([0, 0, 0], include_zero=True)
    assert (axis.lo, axis.hi) == (0, 1)


def test_linear_axis_fixed_ends_are_kept_and_ticks_stay_inside() -> None:
    axis = linear_axis([0.13, 0.93], include_zero=True, fixed_hi=1.0, percent=True)
    assert (axis.lo, axis.hi) == (0, 1.0)
    assert axis.labels() == ("0 %", "20 %", "40 %", "60 %", "80 %", "100 %")
    inside = linear_axis([5, 95], fixed_lo=10, fixed_hi=90)
    assert (inside.lo, inside.hi) == (10, 90)
    assert all(10 <= t <= 90 for t in inside.ticks)


def test_linear_axis_fixed_bound_beyond_all_data() -> None:
    axis = linear_axis([5, 6], fixed_hi=1.0)
    assert axis.lo < axis.hi == 1.0
    with pytest.raises(ValueError):
        linear_axis([1], fixed_lo=2, fixed_hi=1)


def test_tick_labels_stay_distinct_for_offset_ranges() -> None:
    labels = tick_labels([1_000_001, 1_000_002, 1_000_003])
    assert len(set(labels)) == 3
    assert tick_labels([0.0, 0.25, 0.5], percent=True) == ("0 %", "25 %", "50 %")


def test_heavy_tails_want_a_log_axis_unless_a_value_is_zero() -> None:
    from kvroute.report.charts.axes import wants_log

    assert wants_log([0.05, 0.06, 0.07, 0.08, 9.0])  # max 150x the median
    assert not wants_log([0.05, 0.06, 0.07, 0.08, 0.5])
    assert not wants_log([0.0, 0.06, 0.07, 9.0])  # a log axis would drop the zero
    assert not wants_log([])
