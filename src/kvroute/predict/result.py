"""What ``predict`` returns: per-request latencies, percentiles with intervals, the TTFT
split and the saturation verdict. Plain dataclasses; JSON in docs/predict.md."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """One percentile: the point prediction and its 80 % and 95 % intervals."""

    value: float
    ci80: Interval
    ci95: Interval


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """p50/p90/p99 of one latency metric, in seconds."""

    p50: Estimate
    p90: Estimate
    p99: Estimate


@dataclass(frozen=True, slots=True)
class TtftSplit:
    """Mean TTFT in parts (seconds): waiting to start, the request's own uncached prompt
    compute, its attention over the cached prefix, and the rest (step overheads, weight
    reads, sharing steps with other requests, serving overhead). They sum to the mean TTFT."""

    queue_s: float
    uncached_prefill_s: float
    cached_attention_s: float
    overhead_s: float


@dataclass(frozen=True, slots=True)
class Saturation:
    saturated: bool
    sustainable_rate_per_s: float
    """Requests per second the engine completes when kept full (a closed loop at its
    maximum running requests over the same requests)."""
    offered_rate_per_s: float | None
    """The arrivals' mean rate (``None`` for a closed loop)."""
    verdict: str


@dataclass(frozen=True, slots=True)
class PerRequest:
    """Per request, trace order, seconds (NaN where rejected)."""

    queue_s: FloatArray
    ttft_s: FloatArray
    tpot_s: FloatArray
    """(E2E - TTFT) / (output tokens - 1); NaN for one-token outputs."""
    e2e_s: FloatArray
    prompt_tokens: npt.NDArray[np.int64]
    cached_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    admitted: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Prediction:
    engine: str
    model: str
    hardware: str
    num_gpus: int
    capacity_tokens: int | None
    load: str
    """``closed loop, N clients`` or ``open loop, R req/s`` or ``trace arrivals``."""
    calibration_source: str
    """``calibrate``, ``gpu-runs`` (a shipped fit) or ``prior`` (another engine or GPU)."""
    uses_prior: bool
    notes: tuple[str, ...]
    requests: PerRequest
    queue: MetricSummary
    ttft: MetricSummary
    tpot: MetricSummary
    e2e: MetricSummary
    hit_ratio: float
    """Cached prompt tokens / prompt tokens over admitted requests."""
    ttft_split: TtftSplit
    saturation: Saturation
    num_samples: int
    """Coefficient draws behind the intervals."""
    num_rejected: int
