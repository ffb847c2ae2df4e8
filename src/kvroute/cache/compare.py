"""Predicted vs observed cached tokens, per request: the seam for validating the models.

The simulator predicts, for every request, how many prompt tokens an engine serves from
its cache (:attr:`kvroute.cache.replay.loop.ReplayOutcome.cached_tokens`). Anything that
observes the real number (a log's ``usage.prompt_tokens_details.cached_tokens``, an engine
adapter reading ``timings.cache_n`` or a metrics delta) passes both here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class CachedTokensComparison:
    """Over the requests that have an observation."""

    num_requests: int
    prompt_tokens: int
    predicted_tokens: int
    observed_tokens: int
    predicted_hit_ratio: float
    observed_hit_ratio: float
    mean_abs_error_tokens: float
    bias_tokens: float
    """Mean of predicted - observed: > 0 when the model is optimistic."""
    exact_share: float
    within_tolerance_share: float
    tolerance_tokens: int


def compare_cached_tokens(
    predicted: Sequence[int],
    observed: Sequence[int | None],
    prompt_tokens: Sequence[int],
    *,
    tolerance_tokens: int = 0,
) -> CachedTokensComparison | None:
    """Compare per-request predictions with observations (``None``: not observed).

    Returns ``None`` when no request has an observation. Raises ``ValueError`` when the
    three sequences differ in length.
    """
    if not len(predicted) == len(observed) == len(prompt_tokens):
        raise ValueError("predicted, observed and prompt_tokens must have the same length")
    mask = np.array([o is not None for o in observed], dtype=bool)
    if not mask.any():
        return None
    pred = np.asarray(predicted, dtype=np.int64)[mask]
    obs = np.array([o for o in observed if o is not None], dtype=np.int64)
    prompts = np.asarray(prompt_tokens, dtype=np.int64)[mask]
    total = int(prompts.sum())
    err = pred - obs
    return CachedTokensComparison(
        num_requests=int(mask.sum()),
        prompt_tokens=total,
        predicted_tokens=int(pred.sum()),
        observed_tokens=int(obs.sum()),
        predicted_hit_ratio=float(pred.sum() / total) if total else 0.0,
        observed_hit_ratio=float(obs.sum() / total) if total else 0.0,
        mean_abs_error_tokens=float(np.abs(err).mean()),
        bias_tokens=float(err.mean()),
        exact_share=float(np.mean(err == 0)),
        within_tolerance_share=float(np.mean(np.abs(err) <= tolerance_tokens)),
        tolerance_tokens=tolerance_tokens,
    )
