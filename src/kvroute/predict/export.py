"""A :class:`~kvroute.predict.result.Prediction` as JSON (schema: docs/predict.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvroute.predict.result import Estimate, MetricSummary, Prediction

SCHEMA_VERSION = 1


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 6)


def _estimate(e: Estimate) -> dict[str, Any]:
    return {
        "value": _num(e.value),
        "ci80": [_num(e.ci80.low), _num(e.ci80.high)],
        "ci95": [_num(e.ci95.low), _num(e.ci95.high)],
    }


def _metric(m: MetricSummary) -> dict[str, Any]:
    return {"p50": _estimate(m.p50), "p90": _estimate(m.p90), "p99": _estimate(m.p99)}


def _column(values: np.ndarray) -> list[float | None]:
    return [_num(v) for v in values.tolist()]


def prediction_json(p: Prediction, *, per_request: bool = True) -> dict[str, Any]:
    r = p.requests
    out: dict[str, Any] = {
        "kvroute_prediction": SCHEMA_VERSION,
        "engine": p.engine,
        "model": p.model,
        "hardware": p.hardware,
        "num_gpus": p.num_gpus,
        "capacity_tokens": p.capacity_tokens,
        "load": p.load,
        "calibration": {"source": p.calibration_source, "uses_prior": p.uses_prior},
        "notes": list(p.notes),
        "num_requests": int(r.admitted.shape[0]),
        "num_rejected": p.num_rejected,
        "num_samples": p.num_samples,
        "hit_ratio": round(p.hit_ratio, 6),
        "summary_s": {
            "queue": _metric(p.queue),
            "ttft": _metric(p.ttft),
            "tpot": _metric(p.tpot),
            "e2e": _metric(p.e2e),
        },
        "ttft_split_mean_s": {
            "queue": _num(p.ttft_split.queue_s),
            "uncached_prefill": _num(p.ttft_split.uncached_prefill_s),
            "cached_attention": _num(p.ttft_split.cached_attention_s),
            "overhead": _num(p.ttft_split.overhead_s),
        },
        "saturation": {
            "saturated": p.saturation.saturated,
            "sustainable_rate_per_s": _num(p.saturation.sustainable_rate_per_s),
            "offered_rate_per_s": None
            if p.saturation.offered_rate_per_s is None
            else _num(p.saturation.offered_rate_per_s),
            "verdict": p.saturation.verdict,
        },
    }
    if per_request:
        out["requests"] = {
            "queue_s": _column(r.queue_s),
            "ttft_s": _column(r.ttft_s),
            "tpot_s": _column(r.tpot_s),
            "e2e_s": _column(r.e2e_s),
            "prompt_tokens": r.prompt_tokens.tolist(),
            "cached_tokens": r.cached_tokens.tolist(),
            "output_tokens": r.output_tokens.tolist(),
            "admitted": r.admitted.tolist(),
        }
    return out
