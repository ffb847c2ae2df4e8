"""Predicted vs measured cached tokens, per request and overall (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvroute.cache.compare import compare_cached_tokens
from kvroute.engines.base import CacheCounters
from kvroute.types import TokenIds
from kvroute.validate.predict import ModelReplay
from kvroute.validate.result import EngineSetup, RequestCheck, RunInfo, Served, ValidationResult


def compare(
    prompt_ids: Sequence[TokenIds],
    served: Sequence[Served],
    prediction: ModelReplay,
    *,
    setup: EngineSetup,
    counters: CacheCounters | None,
    endpoints: Sequence[str],
    run: RunInfo,
    notes: Sequence[str] = (),
) -> ValidationResult:
    """Per-request and overall comparison of ``prediction`` with what was ``served``.
    ``prompt_ids`` are kvroute's tokenization, checked against the engine's."""
    notes = list(notes)
    predicted = prediction.outcome.cached_tokens.tolist()
    measured = [s.cached_tokens for s in served]
    lengths = prediction.outcome.prompt_tokens.tolist()
    comparison = compare_cached_tokens(predicted, measured, lengths, tolerance_tokens=0)
    assert comparison is not None  # every request has a measurement
    checks, mismatches = _request_checks(prompt_ids, served, predicted, lengths, endpoints)
    if mismatches:
        notes.append(_tokenization_note(mismatches, served))
    engine_prompt = sum(s.prompt_tokens for s in served)
    measured_ratio = sum(measured) / engine_prompt if engine_prompt else 0.0
    counter_ratio = None if counters is None else counters.hit_rate
    counter_note = _counter_note(counters, sum(measured), engine_prompt)
    if counter_note is not None:
        notes.append(counter_note)
    overall = counter_ratio if counter_ratio is not None else measured_ratio
    return ValidationResult(
        engine=run.engine,
        url=run.url,
        model=run.model,
        reset=run.reset,
        run_shape=run.run_shape,
        concurrency=run.concurrency,
        setup=setup,
        num_requests=len(served),
        prompt_tokens=sum(lengths),
        engine_prompt_tokens=engine_prompt,
        num_prompt_mismatches=mismatches,
        predicted_cached_tokens=int(sum(predicted)),
        measured_cached_tokens=sum(measured),
        predicted_hit_ratio=comparison.predicted_hit_ratio,
        measured_hit_ratio=measured_ratio,
        counter_prompt_tokens=None if counters is None else counters.prompt_tokens,
        counter_cached_tokens=None if counters is None else counters.cached_tokens,
        counter_hit_ratio=counter_ratio,
        hit_ratio_error_pp=100.0 * (comparison.predicted_hit_ratio - overall),
        request_mae_pp=_request_mae_pp(predicted, measured, lengths),
        comparison=comparison,
        passes=prediction.passes,
        requests=checks,
        notes=notes,
    )


def _request_checks(
    prompt_ids: Sequence[TokenIds],
    served: Sequence[Served],
    predicted: Sequence[int],
    lengths: Sequence[int],
    endpoints: Sequence[str],
) -> tuple[list[RequestCheck], int]:
    """One check per request (``prompt_ids_match`` is None when the engine did not
    return its prompt ids), and how many prompts the engine tokenized differently."""
    checks = []
    mismatches = 0
    for i, (ids, s) in enumerate(zip(prompt_ids, served, strict=True)):
        same_ids = (
            None if s.prompt_token_ids is None else bool(np.array_equal(ids, s.prompt_token_ids))
        )
        if s.prompt_tokens != ids.shape[0] or same_ids is False:
            mismatches += 1
        checks.append(
            RequestCheck(
                index=i,
                endpoint=endpoints[i],
                prompt_tokens=int(lengths[i]),
                engine_prompt_tokens=s.prompt_tokens,
                prompt_ids_match=same_ids,
                predicted_cached_tokens=int(predicted[i]),
                measured_cached_tokens=s.cached_tokens,
                output_tokens=s.output_tokens,
                sent_s=s.sent_s,
                done_s=s.done_s,
            )
        )
    return checks, mismatches


def _tokenization_note(mismatches: int, served: Sequence[Served]) -> str:
    given = any(s.prompt_token_ids is not None for s in served)
    return (
        f"the engine tokenized {mismatches} prompts differently from kvroute's tokenizer "
        + (
            "(the model was given the engine's own tokens): "
            if given
            else "(their predictions rest on other tokens than the engine cached): "
        )
        + "give the engine's tokenizer with --tokenizer (vLLM: its model directory)"
    )


def _counter_note(
    counters: CacheCounters | None, measured_cached: int, engine_prompt: int
) -> str | None:
    """Why the overall figure may not be the /metrics one: unread, or off the responses."""
    if counters is None:
        return "the engine's /metrics counters could not be read: overall from responses"
    if counters.cached_tokens is None:
        return None
    if counters.cached_tokens == measured_cached and counters.prompt_tokens == engine_prompt:
        return None
    return (
        f"the /metrics deltas ({counters.cached_tokens} cached of "
        f"{counters.prompt_tokens}) differ from the responses ({measured_cached} of "
        f"{engine_prompt}): other traffic, or counters that lag"
    )


def _request_mae_pp(
    predicted: Sequence[int], measured: Sequence[int], lengths: Sequence[int]
) -> float:
    """Mean absolute error of the cached share per request, in percentage points."""
    share_err = [
        abs(p - m) / n for p, m, n in zip(predicted, measured, lengths, strict=True) if n > 0
    ]
    return 100.0 * float(np.mean(share_err)) if share_err else 0.0
