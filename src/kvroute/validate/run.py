"""One validation, end to end: check the engine, reset it, serve the trace, read its
counters, predict the run and compare (``kvroute simulate --validate``)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Sequence

from kvroute.cache.registry import EngineSettings
from kvroute.engines.base import CacheCounters, CacheResetOutcome, EngineAdapter
from kvroute.errors import EngineError, InputError
from kvroute.trace.records import Request
from kvroute.types import JSONValue, TokenIds
from kvroute.validate.bodies import read_answer, request_body
from kvroute.validate.compare import compare
from kvroute.validate.predict import ModelReplay, predict
from kvroute.validate.result import (
    CompletionPath,
    EngineSetup,
    ResetOutcome,
    RunInfo,
    RunShape,
    Served,
    ValidateOptions,
    ValidationResult,
)
from kvroute.validate.serve import Clock, Post, order_slots, serve
from kvroute.validate.settings import read_setup

COUNTER_SETTLE_S = 10.0


async def validate(
    requests: Sequence[Request],
    prompt_ids: Sequence[TokenIds],
    adapter: EngineAdapter,
    post: Post,
    given: EngineSettings,
    *,
    options: ValidateOptions | None = None,
    clock: Clock = time.monotonic,
) -> tuple[ValidationResult, ModelReplay]:
    """Serve ``requests`` (as read: chat, text or token prompts) on the engine behind
    ``adapter`` and compare the model's prediction with what the engine measured.

    ``prompt_ids[i]`` is request ``i`` tokenized as the model should see it. Mutates the
    engine's cache (reset first, unless disabled). Raises ``EngineError`` when the engine
    cannot be read or a request fails, ``InputError`` for hash-only prompts.
    """
    started = clock()
    opts = options or ValidateOptions()
    if len(requests) != len(prompt_ids):
        raise ValueError("one tokenized prompt per request")
    if not requests:
        raise InputError("the trace has no requests")
    await _check_ready(adapter)
    setup = await read_setup(adapter, given)
    models = await adapter.models()
    if not models:
        raise EngineError(f"{adapter.base_url} serves no model")
    outputs = [r.output_len or opts.default_output_tokens for r in requests]
    work = [
        request_body(r, engine=adapter.engine, model=models[0], max_tokens=max(n, 1))
        for r, n in zip(requests, outputs, strict=True)
    ]
    reset, notes = await _reset(adapter, post, models[0], setup, enabled=opts.reset)
    arrivals = _arrivals(requests) if opts.concurrency is None else None
    shape = RunShape.ARRIVALS if arrivals is not None else RunShape.CLOSED_LOOP
    concurrency = None if arrivals is not None else (opts.concurrency or 1)
    served, serve_s, delta = await _serve_counted(
        adapter,
        post,
        work,
        arrivals_s=arrivals,
        concurrency=concurrency or 1,
        send_gap_s=opts.send_gap_s,
        clock=clock,
    )
    prediction = predict(prompt_ids, served, setup, lead_s=opts.lead_s)
    result = compare(
        prompt_ids,
        served,
        prediction,
        setup=setup,
        counters=delta,
        endpoints=[e.name.lower() for e, _ in work],
        run=RunInfo(adapter.engine, adapter.base_url, models[0], reset, shape, concurrency),
        notes=notes,
    )
    return dataclasses.replace(result, serve_s=serve_s, elapsed_s=clock() - started), prediction


async def _check_ready(adapter: EngineAdapter) -> None:
    """Raises ``EngineError`` unless the engine says it is ready to serve."""
    health = await adapter.health()
    if not health.is_ready:
        raise EngineError(
            f"{adapter.engine} at {adapter.base_url} is not ready ({health.state.value}: "
            f"{health.detail})",
            hint="start it with `kvroute engines up`, or check the URL",
        )


async def _reset(
    adapter: EngineAdapter, post: Post, model: str, setup: EngineSetup, *, enabled: bool
) -> tuple[ResetOutcome, list[str]]:
    """Empty the engine's prefix cache unless disabled (llama.cpp: after putting its slots
    in a fresh server's order); returns what happened, and notes when the run may not
    start cold."""
    if not enabled:
        return ResetOutcome.SKIPPED, ["the cache was not reset: the run may not have started cold"]
    if adapter.engine == "llamacpp":
        await order_slots(post, model, setup.reported["num_slots"])
    outcome = await adapter.reset_cache()
    if outcome is CacheResetOutcome.NEEDS_RESTART:
        return ResetOutcome.NEEDS_RESTART, [
            "the engine offers no cache reset: the run may not have started cold "
            "(restart it before validating)"
        ]
    return ResetOutcome.RESET, []


async def _serve_counted(
    adapter: EngineAdapter,
    post: Post,
    work: Sequence[tuple[CompletionPath, dict[str, JSONValue]]],
    *,
    arrivals_s: Sequence[float] | None,
    concurrency: int,
    send_gap_s: float,
    clock: Clock,
) -> tuple[list[Served], float, CacheCounters | None]:
    """Serve ``work`` and read each answer; returns them, the seconds serving took, and
    the engine's counters over the run (None when they cannot be read)."""
    before = await _counters(adapter)
    t_serve = clock()
    answers = await serve(
        work,
        post,
        arrivals_s=arrivals_s,
        concurrency=concurrency,
        send_gap_s=send_gap_s,
        clock=clock,
    )
    serve_s = clock() - t_serve
    served = [read_answer(adapter, a) for a in answers]
    delta = None
    if before is not None:
        expected = sum(s.prompt_tokens for s in served)
        delta = await _counter_delta(adapter, before, expected, clock)
    return served, serve_s, delta


async def _counters(adapter: EngineAdapter) -> CacheCounters | None:
    try:
        return await adapter.cache_counters()
    except EngineError:
        return None


async def _counter_delta(
    adapter: EngineAdapter, before: CacheCounters, expected_prompt_tokens: int, clock: Clock
) -> CacheCounters | None:
    """Counters since ``before``, re-read until they account for every prompt token:
    vLLM's API server updates them from engine-core stats a moment after answering."""
    start = clock()
    while True:
        after = await _counters(adapter)
        if after is None:
            return None
        delta = after.since(before)
        settled = delta.prompt_tokens is None or delta.prompt_tokens >= expected_prompt_tokens
        if settled or clock() - start > COUNTER_SETTLE_S:
            return delta
        await asyncio.sleep(0.2)


def _arrivals(requests: Sequence[Request]) -> list[float] | None:
    times = [r.arrival_s for r in requests]
    if not all(t is not None and math.isfinite(t) for t in times):
        return None
    first = min(t for t in times if t is not None)
    return [t - first for t in times if t is not None]
