"""Small numeric summaries shared by analyze, simulate and bench (percentiles, histograms, CDFs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a sample: count, mean, percentiles, a histogram and CDF points."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    hist_edges: list[float]
    hist_counts: list[int]
    cdf_x: list[float]
    cdf_y: list[float]


def percentile(values: npt.ArrayLike, q: float) -> float | None:
    """The ``q`` quantile (0 to 1) of the finite ``values``, linearly interpolated
    (numpy's default, the definition :func:`describe` and bench use); None for none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.percentile(v, 100 * q)) if v.size else None


def describe(
    values: npt.ArrayLike, *, bins: FloatArray | None = None, log_bins: bool = False
) -> Distribution:
    """Summarise ``values``. Bins: given, log-spaced (``log_bins``) or 20 linear ones."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Distribution(0, None, None, None, None, None, [], [], [], [])
    if bins is None:
        bins = _log_edges(v) if log_bins else np.linspace(v.min(), max(v.max(), v.min() + 1), 21)
    counts, edges = np.histogram(v, bins=bins)
    xs = np.sort(v)
    pick = np.unique(np.linspace(0, xs.size - 1, min(xs.size, 200)).astype(np.int64))
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return Distribution(
        count=int(v.size),
        mean=float(v.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(xs[-1]),
        hist_edges=[float(e) for e in edges],
        hist_counts=[int(c) for c in counts],
        cdf_x=[float(x) for x in xs[pick]],
        cdf_y=[float((i + 1) / xs.size) for i in pick],
    )


def _log_edges(v: FloatArray) -> FloatArray:
    lo = max(v.min(), 1.0)
    hi = max(v.max(), lo * 2)
    a, b = np.floor(np.log2(lo)), np.ceil(np.log2(hi))
    edges = np.exp2(np.arange(a, b + 1))
    edges[0] = min(edges[0], v.min())
    return edges
