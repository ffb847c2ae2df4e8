"""The seam between the decision and its evidence.

The decision compares engines on one figure per request: ``benefit_i / weight_i``
summed over a class (a ratio estimator), so two engines are compared request by request
on the same traffic and the interval of their difference is tight. Two kinds of
evidence fill it:

======================  ========================================  ======================
evidence                benefit_i / weight_i                      metric
======================  ========================================  ======================
``HitEvidence``         cached prompt tokens / prompt tokens      ``prefill_saved``
(hit_evidence.py)       (simulate's engine models at the pool)
``PredictEvidence``     1 if the request meets every SLO / 1      ``slo_attainment``
(latency_evidence.py)   (``kvroute predict``'s TTFT/TPOT)
======================  ========================================  ======================

Swapping one for the other is the only change the decision needs: it reads
:class:`EngineFigures` and nothing else of the evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kvroute.advise.hardware import Hardware
from kvroute.advise.result import LatencySummary
from kvroute.trace.records import Request

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class EngineFigures:
    """One engine on one class's requests: the per-request figures the scoring needs."""

    engine: str
    metric: str
    benefit: FloatArray
    weight: FloatArray
    capacity_tokens: int | None
    details: dict[str, float] = field(default_factory=dict)
    """What the evidence measured besides (evictions, peak running requests)."""
    latency: LatencySummary | None = None
    """The predicted latencies, for latency evidence."""

    @property
    def value(self) -> float:
        total = float(self.weight.sum())
        return float(self.benefit.sum()) / total if total > 0 else 0.0


class LatencyEvidence(Protocol):
    """Per-request figures of one engine serving ``requests`` on ``hardware``.

    ``metric`` names what :attr:`EngineFigures.value` means (higher is better). Must be
    deterministic for the same input (the decision is reproducible), and must not
    mutate ``requests``.
    """

    @property
    def metric(self) -> str: ...

    def figures(
        self,
        requests: Sequence[Request],
        engine: str,
        hardware: Hardware,
        *,
        capacity_tokens: int | None = None,
    ) -> EngineFigures:
        """``capacity_tokens`` overrides the hardware's pool (a sweep, fp8, a replica)."""
        ...
