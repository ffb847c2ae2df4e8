"""Predicted against measured, per metric: the error and whether the 95 % interval holds
the measured value. Pure; the measuring is the CLI's (``predict --validate``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.predict.result import Estimate, Prediction

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Check:
    metric: str
    """``ttft_p50``, ``ttft_p90``, ``ttft_p99``, ``tpot_p50``, ``e2e_p50``, ``e2e_p99``."""
    predicted_s: float
    ci95_s: tuple[float, float]
    measured_s: float
    relative_error: float
    """(predicted - measured) / measured."""
    inside_ci95: bool


def compare(
    p: Prediction, ttft_s: FloatArray, tpot_s: FloatArray, e2e_s: FloatArray
) -> list[Check]:
    """Checks of ``p`` against measured per-request values (NaN for failures dropped)."""
    picks: list[tuple[str, Estimate, FloatArray, float]] = [
        ("ttft_p50", p.ttft.p50, ttft_s, 50),
        ("ttft_p90", p.ttft.p90, ttft_s, 90),
        ("ttft_p99", p.ttft.p99, ttft_s, 99),
        ("tpot_p50", p.tpot.p50, tpot_s, 50),
        ("e2e_p50", p.e2e.p50, e2e_s, 50),
        ("e2e_p99", p.e2e.p99, e2e_s, 99),
    ]
    out = []
    for name, est, values, q in picks:
        v = values[np.isfinite(values)]
        if v.size == 0:
            continue
        measured = float(np.percentile(v, q))
        out.append(
            Check(
                metric=name,
                predicted_s=est.value,
                ci95_s=(est.ci95.low, est.ci95.high),
                measured_s=measured,
                relative_error=(est.value - measured) / measured if measured > 0 else float("nan"),
                inside_ci95=est.ci95.low <= measured <= est.ci95.high,
            )
        )
    return out
