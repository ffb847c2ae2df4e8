"""Chart axes: round tick values, domains and tick labels, independent of drawing.

An :class:`Axis` maps a data value to a fraction of the plot (0 at ``lo``, 1 at ``hi``).
Linear ticks step by 1, 2, 2.5 or 5 times a power of ten; log ticks are powers of ten.
Percent axes take fractions (0.25) and label them as percentages (``25 %``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvroute.report.fmt import percent, si

_STEP_MANTISSAS = (1.0, 2.0, 2.5, 5.0)
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Axis:
    """A value range ``[lo, hi]`` (``lo < hi``; both > 0 when ``log``) with its ticks."""

    lo: float
    hi: float
    ticks: tuple[float, ...]
    log: bool = False
    percent: bool = False
    minor_ticks: tuple[float, ...] = ()

    def fraction(self, value: float) -> float:
        """Position of ``value`` along the axis: 0.0 at ``lo``, 1.0 at ``hi``, beyond outside."""
        if self.log:
            return (math.log10(value) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo)
            )
        return (value - self.lo) / (self.hi - self.lo)

    def labels(self) -> tuple[str, ...]:
        """One label per tick, with the fewest significant digits that keeps them distinct."""
        return tick_labels(self.ticks, percent=self.percent)

    def format(self, value: float) -> str:
        """One value in this axis's style (for tooltips and bar value labels)."""
        return percent(value) if self.percent else si(value)


def nice_ticks(lo: float, hi: float, *, max_ticks: int = 6) -> tuple[float, ...]:
    """Evenly spaced round ticks covering ``[lo, hi]``: first <= ``lo``, last >= ``hi``.

    The step is 1, 2, 2.5 or 5 times a power of ten, chosen so there are at most
    ``max_ticks`` intervals. A zero-width range is widened around its value first. Ends
    may miss by float noise (a billionth of a step).
    Raises ``ValueError`` for non-finite bounds, ``lo > hi`` or ``max_ticks < 2`` (a range
    across zero always needs two intervals).
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or max_ticks < 2:
        raise ValueError(f"bad tick range [{lo}, {hi}] with max_ticks={max_ticks}")
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-12 or hi - lo < 1e-200:  # one value, or noise
        mid = (lo + hi) / 2
        if abs(mid) > 1e-200:
            lo, hi = min(lo, mid - abs(mid) / 10), max(hi, mid + abs(mid) / 10)
        else:
            lo, hi = min(lo, 0.0), max(hi, 1.0)
    exponent = math.floor(math.log10((hi - lo) / max_ticks))
    while True:
        for mantissa in _STEP_MANTISSAS:
            step = mantissa * 10.0**exponent
            first = math.floor(lo / step + _EPS)
            last = math.ceil(hi / step - _EPS)
            if last - first <= max_ticks:
                decimals = max(0, -exponent + (1 if mantissa == 2.5 else 0))
                return tuple(round(k * step, decimals) + 0.0 for k in range(first, last + 1))
        exponent += 1


def log_ticks(lo: float, hi: float, *, max_ticks: int = 8) -> tuple[float, ...]:
    """Powers of ten covering ``[lo, hi]`` (both > 0), every k-th decade if there are many.

    Raises ``ValueError`` unless ``0 < lo <= hi`` and both are finite.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or not 0 < lo <= hi:
        raise ValueError(f"bad log tick range [{lo}, {hi}]")
    first = math.floor(math.log10(lo) + _EPS)
    last = math.ceil(math.log10(hi) - _EPS)
    if first == last:
        first, last = first - 1, last + 1
    stride = max(1, math.ceil((last - first) / max_ticks))
    last = first + stride * math.ceil((last - first) / stride)
    return tuple(10.0**k for k in range(first, last + 1, stride))


def tick_labels(ticks: Sequence[float], *, percent: bool = False) -> tuple[str, ...]:
    """SI labels for ``ticks`` (``"25 %"`` style when ``percent``), distinct where possible."""
    scaled = [t * 100 for t in ticks] if percent else list(ticks)
    labels: tuple[str, ...] = ()
    for digits in range(3, 10):
        labels = tuple(si(v, digits=digits) for v in scaled)
        if len(set(labels)) == len(labels):
            break
    return tuple(f"{label} %" for label in labels) if percent else labels


def linear_axis(
    values: Sequence[float],
    *,
    include_zero: bool = False,
    fixed_lo: float | None = None,
    fixed_hi: float | None = None,
    percent: bool = False,
    max_ticks: int = 6,
) -> Axis:
    """A linear axis spanning ``values`` (finite, at least one unless both bounds are fixed).

    Unfixed ends extend to the outermost round tick; fixed ends are kept exactly and only
    ticks inside them are shown. Raises ``ValueError`` if ``fixed_lo >= fixed_hi``.
    """
    if fixed_lo is not None and fixed_hi is not None and fixed_lo >= fixed_hi:
        raise ValueError(f"axis bounds must satisfy lo < hi, got [{fixed_lo}, {fixed_hi}]")
    pool = [*values, 0.0] if include_zero else list(values)
    lo = fixed_lo if fixed_lo is not None else min(pool, default=0.0)
    hi = fixed_hi if fixed_hi is not None else max(pool, default=1.0)
    if lo >= hi and fixed_lo is not None:  # every value at or below the fixed floor
        hi = lo + (abs(lo) or 1.0)
    elif lo >= hi and fixed_hi is not None:  # every value at or above the fixed ceiling
        lo = hi - (abs(hi) or 1.0)
    scale = 100.0 if percent else 1.0
    ticks = tuple(t / scale for t in nice_ticks(lo * scale, hi * scale, max_ticks=max_ticks))
    lo = fixed_lo if fixed_lo is not None else ticks[0]
    hi = fixed_hi if fixed_hi is not None else ticks[-1]
    tol = (hi - lo) * 1e-6
    inside = tuple(t for t in ticks if lo - tol <= t <= hi + tol)
    return Axis(lo=lo, hi=hi, ticks=inside, percent=percent)


def _snap(value: float, *, up: bool) -> float:
    """The nearest 1, 2 or 5 times a power of ten at or beyond ``value`` (> 0)."""
    exponent = math.floor(math.log10(value))
    grid = [m * 10.0**e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
    return min(g for g in grid if g >= value) if up else max(g for g in grid if g <= value)


def log_axis(values: Sequence[float], *, max_ticks: int = 8) -> Axis:
    """A base-10 log axis spanning ``values`` (positive, at least one); ticks are powers of ten.

    The range snaps outward to the nearest 1, 2 or 5 times a power of ten, so a curve from
    1k to 1.05M gets an axis from 1k to 2M rather than to 10M, with minor ticks at 2..9
    times each decade. If that holds fewer than two powers of ten, or more than
    ``max_ticks`` + 1, the range widens to whole decades instead (every k-th labelled).
    """
    lo, hi = min(values), max(values)
    lo, hi = (lo / 10, hi * 10) if lo == hi else (lo, hi)
    lo, hi = _snap(lo, up=False), _snap(hi, up=True)
    first = math.ceil(math.log10(lo) - _EPS)
    last = math.floor(math.log10(hi) + _EPS)
    if not 2 <= last - first + 1 <= max_ticks + 1:
        ticks = log_ticks(lo, hi, max_ticks=max_ticks)
        return Axis(lo=ticks[0], hi=ticks[-1], ticks=ticks, log=True)
    ticks = tuple(10.0**k for k in range(first, last + 1))
    minor = tuple(
        m * 10.0**d
        for d in range(first - 1, last + 1)
        for m in range(2, 10)
        if lo <= m * 10.0**d <= hi
    )
    return Axis(lo=lo, hi=hi, ticks=ticks, log=True, minor_ticks=minor)


HEAVY_TAIL_RATIO = 20.0


def wants_log(values: Sequence[float]) -> bool:
    """Whether ``values`` are heavy-tailed enough to plot on a log axis: all positive
    (a log axis cannot show zero, and a series there would vanish) and the largest at
    least ``HEAVY_TAIL_RATIO`` times the median, where a linear axis squeezes the bulk of
    the sample into its first tick."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite or finite[0] <= 0:
        return False
    return finite[-1] >= HEAVY_TAIL_RATIO * finite[len(finite) // 2]
