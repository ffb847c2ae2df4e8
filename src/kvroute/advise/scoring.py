"""Engines compared on the same requests, with intervals, and the margin a move must clear. Pure.

A class's figure is a ratio over requests, ``Σ benefit / Σ weight``. Requests of one
session are not independent (a cold first turn, then warm ones), so the interval is
computed over *clusters* (sessions; a request without a session is its own) with the
linearised ratio estimator::

    r   = Σ_c B_c / Σ_c W_c                      (B_c, W_c: a cluster's sums)
    var = n/(n-1) · Σ_c (B_c - r·W_c)² / (Σ_c W_c)²,   n clusters
    r ± 1.96 · sqrt(var)

Two engines on the same requests are compared by the same formula on the difference
of their benefits (the weights are the same prompts), which cancels what the clusters
share and gives a far tighter interval than two separate ones would.

Margin: adding an engine to what a team runs, or switching to one, must beat the
incumbent's figure by ``margin`` on the interval's *lower* bound. The margin grows as
the team shrinks and as its tolerance for operations work falls (:data:`TEAM_MARGIN`,
:data:`OPS_FACTOR`); an engine the fleet already runs for another class costs half.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.advise.base import EngineFigures, FloatArray
from kvroute.advise.options import Ops, Team

Z_95 = 1.96

TEAM_MARGIN: tuple[tuple[int, float], ...] = ((1, 0.10), (2, 0.07), (5, 0.05), (10, 0.03))
"""(largest team size, margin): one person needs 10 points of the figure to take on a
second engine; above ten people, 2 points."""
LARGE_TEAM_MARGIN = 0.02
OPS_FACTOR = {Ops.LOW: 1.5, Ops.MEDIUM: 1.0, Ops.HIGH: 0.6}
FLEET_DISCOUNT = 0.5
"""An engine the deployment already runs for another class: half the margin."""


@dataclass(frozen=True, slots=True)
class Interval:
    estimate: float
    low: float
    high: float

    @property
    def width(self) -> float:
        return self.high - self.low


def switching_margin(team: Team, *, in_fleet: bool = False) -> float:
    base = next((m for size, m in TEAM_MARGIN if team.size <= size), LARGE_TEAM_MARGIN)
    margin = base * OPS_FACTOR[team.ops]
    return margin * FLEET_DISCOUNT if in_fleet else margin


def cluster_ids(keys: Sequence[str | None]) -> list[int]:
    """One integer per distinct key; a ``None`` key is a cluster of its own."""
    index: dict[str, int] = {}
    out = []
    for i, key in enumerate(keys):
        if key is None:
            out.append(-(i + 1))
        else:
            out.append(index.setdefault(key, len(index)))
    return out


def _cluster_sums(values: FloatArray, clusters: FloatArray) -> FloatArray:
    _, inverse = np.unique(clusters, return_inverse=True)
    return np.bincount(inverse, weights=values).astype(np.float64)


def ratio_interval(
    benefit: FloatArray, weight: FloatArray, clusters: Sequence[int] | None = None
) -> Interval:
    """``Σ benefit / Σ weight`` with its 95 % interval over clusters (see module doc)."""
    ids = np.asarray(
        clusters if clusters is not None else np.arange(benefit.size), dtype=np.float64
    )
    b = _cluster_sums(benefit, ids) if benefit.size else benefit
    w = _cluster_sums(weight, ids) if weight.size else weight
    total = float(w.sum())
    if total <= 0:
        return Interval(0.0, 0.0, 0.0)
    r = float(b.sum()) / total
    n = int(b.size)
    if n < 2:
        return Interval(r, -math.inf, math.inf)
    var = n / (n - 1) * float(np.sum((b - r * w) ** 2)) / total**2
    half = Z_95 * math.sqrt(var)
    return Interval(r, r - half, r + half)


def difference(
    candidate: EngineFigures, incumbent: EngineFigures, clusters: Sequence[int] | None = None
) -> Interval:
    """``candidate - incumbent`` on the same requests, with its 95 % interval."""
    if candidate.benefit.shape != incumbent.benefit.shape:
        raise ValueError("the two engines' figures cover different requests")
    return ratio_interval(candidate.benefit - incumbent.benefit, incumbent.weight, clusters)


def requests_to_resolve(num_requests: int, interval: Interval, margin: float) -> int | None:
    """How many requests would shrink the interval until it clears or misses ``margin``
    (the width falls as 1/sqrt(n)); ``None`` when it already does."""
    if interval.low > margin or interval.high < margin or not math.isfinite(interval.width):
        return None
    distance = max(abs(interval.estimate - margin), 1e-3)
    half = interval.width / 2
    return math.ceil(num_requests * (half / distance) ** 2)
