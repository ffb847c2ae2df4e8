"""Traffic shape: prompt and output lengths, the mix of request kinds, arrivals over
time and, where the trace has end times, how many requests were in flight."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.stats import Distribution, describe

LENGTH_CLASSES: tuple[tuple[str, int, int | None], ...] = (
    ("short (< 1k tokens)", 0, 1024),
    ("medium (1k-8k)", 1024, 8192),
    ("long (8k-32k)", 8192, 32768),
    ("very long (>= 32k)", 32768, None),
)


@dataclass(frozen=True, slots=True)
class ArrivalSeries:
    bucket_s: float
    start_s: float
    requests_per_s: list[float]


@dataclass(frozen=True, slots=True)
class Concurrency:
    mean: float
    p50: float
    p90: float
    max: int


@dataclass(frozen=True, slots=True)
class ShapeResult:
    num_requests: int
    prompt_tokens: Distribution
    output_tokens: Distribution
    length_mix: list[tuple[str, float]]
    share_with_tools: float
    share_structured: float
    structured_kinds: dict[str, int]
    share_chat: float
    duration_s: float | None
    mean_rate_per_s: float | None
    arrivals: ArrivalSeries | None
    concurrency: Concurrency | None
    """From arrival and end times; None when fewer than 90 % of requests have both."""


def _nice_bucket(duration_s: float, target_buckets: int = 60) -> float:
    raw = max(duration_s / target_buckets, 1e-3)
    for step in (0.001, 0.01, 0.1, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400):
        if step >= raw:
            return float(step)
    return float(np.ceil(raw / 86400) * 86400)


def concurrency_of(
    arrival: npt.NDArray[np.float64], end: npt.NDArray[np.float64]
) -> Concurrency | None:
    """Requests in flight from arrival and end times (None when under 90 % have both)."""
    ok = np.isfinite(arrival) & np.isfinite(end) & (end >= arrival)
    if ok.sum() < 0.9 * arrival.size or ok.sum() == 0:
        return None
    a, e = arrival[ok], end[ok]
    times = np.concatenate([a, e])
    deltas = np.concatenate([np.ones_like(a), -np.ones_like(e)])
    order = np.lexsort((deltas, times))  # ends before starts at equal times
    level = np.cumsum(deltas[order])
    t = times[order]
    span = t[-1] - t[0]
    mean = float(np.sum(level[:-1] * np.diff(t)) / span) if span > 0 else float(level.max())
    at_arrivals = level[deltas[order] > 0]
    return Concurrency(
        mean=mean,
        p50=float(np.percentile(at_arrivals, 50)),
        p90=float(np.percentile(at_arrivals, 90)),
        max=int(level.max()),
    )


def shape_of(
    prompt_len: npt.NDArray[np.float64],
    output_len: npt.NDArray[np.float64],
    arrival_s: npt.NDArray[np.float64],
    end_s: npt.NDArray[np.float64],
    has_tools: npt.NDArray[np.bool_],
    structured: list[str],
    is_chat: npt.NDArray[np.bool_],
) -> ShapeResult:
    """Shape from per-request columns (NaN where a value is unknown)."""
    n = int(prompt_len.size)
    mix = []
    for label, lo, hi in LENGTH_CLASSES:
        sel = (prompt_len >= lo) if hi is None else ((prompt_len >= lo) & (prompt_len < hi))
        mix.append((label, float(sel.mean()) if n else 0.0))
    kinds: dict[str, int] = {}
    for k in structured:
        if k != "none":
            kinds[k] = kinds.get(k, 0) + 1
    timed = arrival_s[np.isfinite(arrival_s)]
    duration = float(timed.max() - timed.min()) if timed.size >= 2 else None
    arrivals = None
    rate = None
    if duration is not None and duration > 0:
        rate = timed.size / duration
        bucket = _nice_bucket(duration)
        start = float(np.floor(timed.min() / bucket) * bucket)
        counts = np.bincount(((timed - start) // bucket).astype(np.int64))
        arrivals = ArrivalSeries(bucket, start, [float(c) / bucket for c in counts])
    return ShapeResult(
        num_requests=n,
        prompt_tokens=describe(prompt_len, log_bins=True),
        output_tokens=describe(output_len, log_bins=True),
        length_mix=mix,
        share_with_tools=float(has_tools.mean()) if n else 0.0,
        share_structured=sum(kinds.values()) / n if n else 0.0,
        structured_kinds=kinds,
        share_chat=float(is_chat.mean()) if n else 0.0,
        duration_s=duration,
        mean_rate_per_s=rate,
        arrivals=arrivals,
        concurrency=concurrency_of(arrival_s, end_s),
    )
