"""Fit the step-time coefficients to measured closed-loop runs, through the schedule.

A measured run (a :class:`RunPoint`: engine, model, hardware, a closed loop of ``C``
clients sending ``isl``/``osl`` requests, measured TTFT and TPOT) is replayed with the
current coefficients. In a closed loop every arrival is a step's end, so each request's
TTFT is ``(basis at first token - basis at arrival) . c + c_request`` and its TPOT
``(basis at end - basis at first token) . c / (osl - 1)``: linear in ``c`` for a fixed
schedule. One row per metric and run (the basis of the requests around the median,
divided by the measured value so the fit minimises relative error), non-negative least
squares, replay with the new coefficients, repeat until the schedule stops moving.

``bootstrap`` resamples runs (their rows at the final schedule) and refits: the spread
of those fits is the coefficients' uncertainty. Pure: the caller passes the generator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.predict.engine import EngineFlags, EngineSim
from kvroute.predict.hardware import Hardware, ModelCost
from kvroute.predict.nnls import nnls
from kvroute.predict.replay import Arrivals, ReplayTimes
from kvroute.predict.steptime import FEATURES, NUM_STEP, StepBasis, Vector
from kvroute.predict.workload import FixedWorkload

FloatArray = npt.NDArray[np.float64]

INITIAL: Vector = (2e-3, 2e-5, 2.0, 1.0, 1.5, 2e-5, 1.0, 5e-6, 0.02, 1e-4)
"""Where the fit starts (any positive guess converges; this one is near GPU fits)."""
LOWER: Vector = tuple(1.0 if f in ("prefill", "memory") else 0.0 for f in FEATURES)
"""Lower bounds: a prefill cannot beat the datasheet FLOPs, nor a step the bandwidth
(``prefill`` and ``memory`` are seconds at the roofline). Without them the fit can trade
an impossible prefill speed for a larger per-step constant on a few runs."""
GPU_UPPER: dict[str, float] = {"request": 0.010}
"""Upper bounds for fits on GPU servers, seconds: a request's fixed serving overhead (HTTP,
tokenizing, the first detokenize) is a few milliseconds on a server's CPU. Unbounded, the
fit on heavily loaded runs alone (every SGLang H100 run has 16+ clients) put about 0.1 s
there, queueing it could not otherwise explain, and then predicted it for a lone request
too. (``calibrate`` on a live engine measures light loads, so it needs no bound.)"""
MIDDLE = (0.4, 0.6)
"""The requests whose basis makes a run's row: those between these TTFT/TPOT quantiles."""


@dataclass(frozen=True, slots=True)
class RunPoint:
    """One measured closed-loop run."""

    label: str
    """The group it is reported in (engine, hardware, model, precision)."""
    engine: str
    hardware: Hardware
    cost: ModelCost
    capacity_tokens: int | None
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    prefix_tokens: int = 0
    num_requests: int | None = None
    """Requests the replay serves; default ``max(3 C, 32)``."""
    statistic: str = "median"
    """What the measured TTFT/TPOT are: ``median`` (steady state: the replay's requests
    around the median) or ``mean`` (a benchmark's average over all ``num_requests``, the
    first wave of ``C`` clients starting together included)."""


@dataclass(frozen=True, slots=True)
class PointPrediction:
    ttft_s: float
    tpot_s: float


@dataclass(frozen=True, slots=True)
class FitResult:
    coefficients: Vector
    predictions: tuple[PointPrediction, ...]
    sigma_ttft: float
    """Standard deviation of log(measured / predicted) TTFT over the points."""
    sigma_tpot: float
    num_iterations: int
    rows: FloatArray
    """The final design rows (2 per point: TTFT then TPOT), relative; for the bootstrap."""
    upper: Mapping[str, float] | None = None
    """The upper bounds the fit ran with (the bootstrap keeps them)."""


def usable(p: RunPoint) -> bool:
    """Whether a run's measurements can make rows (finite and positive)."""
    return all(math.isfinite(v) and v > 0 for v in (p.ttft_s, p.tpot_s))


def _replay_point(p: RunPoint, flags: EngineFlags, coef: Vector) -> ReplayTimes:
    n = p.num_requests or max(3 * p.concurrency, 32)
    sim = EngineSim(p.engine, flags, p.capacity_tokens)
    reqs = FixedWorkload(p.isl, p.osl, num_requests=n, prefix_tokens=p.prefix_tokens).requests()
    work = sim.workload(reqs, [p.osl] * n, Arrivals(num_clients=p.concurrency))
    return sim.run(work, StepBasis(p.cost, p.hardware), coef, record=True)


def _middle(values: FloatArray) -> npt.NDArray[np.bool_]:
    ok = np.isfinite(values)
    lo, hi = np.quantile(values[ok], MIDDLE)
    pick: npt.NDArray[np.bool_] = ok & (values >= lo) & (values <= hi)
    if not pick.any():  # few requests, nearly equal values: the one nearest the median
        gap = np.where(ok, np.abs(values - np.median(values[ok])), np.inf)
        pick = np.zeros(values.shape, dtype=bool)
        pick[int(np.argmin(gap))] = True
    return pick


def _rows(p: RunPoint, t: ReplayTimes) -> tuple[FloatArray, FloatArray, PointPrediction]:
    """The run's TTFT and TPOT rows (absolute, seconds per coefficient) and predictions."""
    assert t.arrival_basis is not None and t.first_basis is not None and t.end_basis is not None
    ttft = t.first_token_s - t.arrival_s
    decode_steps = max(p.osl - 1, 1)
    tpot = (t.end_s - t.first_token_s) / decode_steps
    mean = p.statistic == "mean"
    m = np.isfinite(ttft) if mean else _middle(ttft)
    ttft_steps = (t.first_basis[m] - t.arrival_basis[m]).mean(axis=0)
    ttft_row = np.append(ttft_steps, [1.0, float(t.in_system[m].mean())])
    m2 = np.isfinite(tpot) if mean else _middle(tpot)
    tpot_steps = (t.end_basis[m2] - t.first_basis[m2]).mean(axis=0) / decode_steps
    tpot_row = np.append(tpot_steps, [0.0, 0.0])
    stat = np.nanmean if mean else np.nanmedian
    pred = PointPrediction(float(stat(ttft)), float(stat(tpot)))
    return ttft_row, tpot_row, pred


def _solve(rows: FloatArray, bounds: Mapping[str, float] | None = None) -> Vector:
    """Bounded least squares on relative rows (target 1): ``x = LOWER + y`` with ``y >= 0``,
    columns scaled for conditioning; a coefficient past its upper bound (``bounds``) is
    held there and the others refitted."""
    lower = np.array(LOWER)
    upper = np.array([(bounds or {}).get(f, np.inf) for f in FEATURES])
    x = lower.copy()
    free = np.ones(len(FEATURES), dtype=bool)
    while True:  # clamp what passes its upper bound there and refit the rest
        fixed = ~free
        sub = rows[:, free]
        target = np.ones(rows.shape[0]) - rows[:, fixed] @ x[fixed] - sub @ lower[free]
        scale = np.sqrt((sub**2).sum(axis=0))
        scale[scale == 0] = 1.0
        x[free] = lower[free] + nnls(sub / scale, target) / scale
        over = free & (x > upper)
        if not over.any():
            return tuple(float(v) for v in x)
        x[over] = upper[over]
        free &= ~over


def predict_points(
    points: Sequence[RunPoint], coef: Vector, flags: EngineFlags | None = None
) -> list[PointPrediction]:
    """Median TTFT and TPOT of each run's replay under ``coef``."""
    f = flags or EngineFlags()
    return [_rows(p, _replay_point(p, f, coef))[2] for p in points]


def fit(
    points: Sequence[RunPoint],
    flags: EngineFlags | None = None,
    *,
    initial: Vector = INITIAL,
    max_iterations: int = 6,
    tolerance: float = 0.01,
    upper: Mapping[str, float] | None = None,
) -> FitResult:
    """Non-negative coefficients for ``points`` (one engine, one hardware kind); ``upper``
    caps coefficients by name (:data:`GPU_UPPER`)."""
    if not points:
        raise ValueError("nothing to fit")
    if not all(usable(p) for p in points):
        raise ValueError("every run needs a finite, positive measured TTFT and TPOT")
    f = flags or EngineFlags()
    coef = initial
    rows = np.zeros((0, len(FEATURES)))
    preds: list[PointPrediction] = []
    num_iterations = 0
    for num_iterations in range(1, max_iterations + 1):  # noqa: B007 (reported below)
        built = [_rows(p, _replay_point(p, f, coef)) for p in points]
        rows = np.array(
            [
                r
                for p, (a, b, _) in zip(points, built, strict=True)
                for r in (a / p.ttft_s, b / p.tpot_s)
            ]
        )
        preds = [b[2] for b in built]
        new = _solve(rows, upper)
        moved = max(
            abs(n - o) / max(abs(o), 1e-12) for n, o in zip(new, coef, strict=True) if n or o
        )
        coef = new
        if moved < tolerance:
            break
    preds = predict_points(points, coef, f)
    return FitResult(
        coefficients=coef,
        predictions=tuple(preds),
        sigma_ttft=_log_sigma([p.ttft_s for p in points], [q.ttft_s for q in preds]),
        sigma_tpot=_log_sigma([p.tpot_s for p in points], [q.tpot_s for q in preds]),
        num_iterations=num_iterations,
        rows=rows,
        upper=upper,
    )


def _log_sigma(measured: Sequence[float], predicted: Sequence[float]) -> float:
    r = [
        math.log(m / p)
        for m, p in zip(measured, predicted, strict=True)
        if m > 0 and p > 0 and math.isfinite(p)
    ]
    if len(r) < 2:
        return 0.0
    return float(np.std(r, ddof=1))


def bootstrap(
    result: FitResult, rng: np.random.Generator, *, num_samples: int = 40
) -> list[Vector]:
    """Refits on runs drawn with replacement (both rows of a run together), at the final
    schedule: the coefficients' sampling spread."""
    rows = result.rows
    num_points = rows.shape[0] // 2
    out: list[Vector] = []
    for _ in range(num_samples):
        pick = rng.integers(0, num_points, size=num_points)
        idx = np.concatenate([2 * pick, 2 * pick + 1])
        out.append(_solve(rows[idx], result.upper))
    return out


def relative_errors(points: Sequence[RunPoint], preds: Sequence[PointPrediction]) -> FloatArray:
    """``(n, 2)`` array of |predicted - measured| / measured, TTFT then TPOT."""
    return np.array(
        [
            (abs(q.ttft_s - p.ttft_s) / p.ttft_s, abs(q.tpot_s - p.tpot_s) / p.tpot_s)
            for p, q in zip(points, preds, strict=True)
        ]
    )


__all__ = ["NUM_STEP", "FitResult", "PointPrediction", "RunPoint", "bootstrap", "fit"]
