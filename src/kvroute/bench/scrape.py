"""Engine cache readings around a run, through the engine adapters.

Before a run: find the engine (given, or recognised from its ``/metrics`` names), the
model it serves, put its cache in the requested state and read its cumulative
counters; after: read them again. The difference is the engine's own hit rate over
the run. Per-response readings (``timings.cache_n``, ``usage.prompt_tokens_details``)
are read with the same adapter from each response's last chunk.

An endpoint that cannot be reached is not an error here: the run goes ahead and every
request reports it (and the notes say what could not be read).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from kvroute.bench.results.record import RequestRecord
from kvroute.engines.base import CacheCounters, CacheResetOutcome, EngineAdapter, UsageSource
from kvroute.engines.http import openai_usage
from kvroute.engines.registry import adapter_registry, make_adapter
from kvroute.errors import EngineError

_PREFIXES = (("llamacpp:", "llamacpp"), ("vllm:", "vllm"), ("sglang:", "sglang"))


class CacheMode(enum.Enum):
    """What to do with an engine's cache before each run."""

    COLD = "cold"
    """Reset it (the adapter's reset); falls back to warm where the engine offers none."""
    WARM = "warm"
    """Leave it as the previous run left it."""
    SALTED = "salted"
    """Leave it, but start every prompt of the run with a run-unique salt, so nothing
    cached before the run can match while prefixes within the run still do."""


class CacheState(enum.Enum):
    """What the cache actually was at the start of a run (recorded in the result)."""

    COLD = "cold"
    WARM = "warm"
    SALTED = "salted"
    UNKNOWN = "unknown"
    """No engine adapter for this endpoint: nothing known about its cache."""


@dataclass(slots=True)
class EndpointState:
    """What ``prepare`` learned; ``finish`` adds the counter delta."""

    engine: str | None
    model: str | None
    cache_state: CacheState
    before: CacheCounters | None = None
    delta: CacheCounters | None = None
    notes: list[str] = field(default_factory=list)


def root_url(url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p`` (adapters add their own paths)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


async def detect_engine(client: httpx.AsyncClient, base_url: str) -> str | None:
    """The adapter name whose metric prefix ``/metrics`` shows; None when none does."""
    try:
        response = await client.get(f"{base_url}/metrics", timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    text = response.text
    for prefix, name in _PREFIXES:
        if prefix in text:
            return name
    return None


async def prepare(
    client: httpx.AsyncClient,
    url: str,
    *,
    engine: str | None,
    model: str | None,
    mode: CacheMode,
) -> EndpointState:
    """Engine, model, cache state and the counters before a run."""
    base = root_url(url)
    if engine is not None:
        adapter_registry().get(engine)  # an unknown name lists the valid ones
    engine = engine or await detect_engine(client, base)
    state = EndpointState(engine=engine, model=model, cache_state=CacheState.UNKNOWN)
    if engine is None:
        state.notes.append("engine not recognised: no cache counters")
        state.cache_state = CacheState.SALTED if mode is CacheMode.SALTED else CacheState.UNKNOWN
        state.model = model or await _first_model(client, base, state)
        return state
    adapter = make_adapter(engine, base, client=client)
    health = await adapter.health()
    if not health.is_ready:
        state.notes.append(f"health: {health.state.value} {health.detail}".strip())
    if state.model is None:
        try:
            models = await adapter.models()
            state.model = models[0] if models else None
        except EngineError as exc:
            state.notes.append(f"models: {exc}")
    state.cache_state = await _set_cache(adapter, mode, state)
    state.before = await _counters(adapter, state)
    return state


async def finish(
    client: httpx.AsyncClient, url: str, state: EndpointState, records: Sequence[RequestRecord]
) -> None:
    """Read each response's cache figures and the counters again (delta kept; None
    where unreadable)."""
    adapter = (
        None if state.engine is None else make_adapter(state.engine, root_url(url), client=client)
    )
    for rec in records:
        reading = _response_usage(adapter, rec.usage_body)
        if reading is not None:
            rec.prompt_tokens, rec.cached_tokens, rec.cache_source = reading
    if adapter is None or state.before is None:
        return
    after = await _counters(adapter, state)
    if after is None:
        return
    try:
        state.delta = after.since(state.before)
    except EngineError as exc:
        state.notes.append(str(exc))


def _response_usage(
    adapter: EngineAdapter | None, body: Mapping[str, Any] | None
) -> tuple[int, int, str] | None:
    """``(prompt_tokens, cached_tokens, source)`` from one response's usage body: the
    adapter's reading, or plain OpenAI ``usage`` for an unrecognised engine."""
    if body is None:
        return None
    try:
        if adapter is None:
            usage = openai_usage(body)
            return None if usage is None else (usage[0], usage[1], UsageSource.OPENAI_USAGE.value)
        reading = adapter.response_cache_usage(body)
    except EngineError:
        return None
    if reading is None:
        return None
    return reading.prompt_tokens, reading.cached_tokens, reading.source.value


async def _set_cache(adapter: EngineAdapter, mode: CacheMode, state: EndpointState) -> CacheState:
    if mode is CacheMode.SALTED:
        return CacheState.SALTED
    if mode is CacheMode.WARM:
        return CacheState.WARM
    try:
        outcome = await adapter.reset_cache()
    except EngineError as exc:
        state.notes.append(f"cache reset failed: {exc}")
        return CacheState.WARM
    if outcome is CacheResetOutcome.NEEDS_RESTART:
        state.notes.append("the engine offers no cache reset here: the run starts warm")
        return CacheState.WARM
    return CacheState.COLD


async def _counters(adapter: EngineAdapter, state: EndpointState) -> CacheCounters | None:
    try:
        return await adapter.cache_counters()
    except EngineError as exc:
        state.notes.append(f"cache counters: {exc}")
        return None


async def _first_model(client: httpx.AsyncClient, base: str, state: EndpointState) -> str | None:
    try:
        response = await client.get(f"{base}/v1/models", timeout=5.0)
        data = response.json().get("data") or []
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        state.notes.append(f"models: {type(exc).__name__}")
        return None
