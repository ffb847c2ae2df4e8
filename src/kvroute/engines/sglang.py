"""Adapter for SGLang's HTTP server (``python -m sglang.launch_server``).

Checked against SGLang 0.5.23's own server on the CPU (``scripts/install-engines sglang``,
``tests/engines/test_sglang.py``): ``/health``, ``/v1/models``, ``/get_server_info``
(pool size, page size and the radix-cache settings at its top level), ``/metrics`` and
``POST /flush_cache``.

What the server must be started with for each reading:

- ``--enable-metrics``: ``/metrics`` (load, server-wide cache counters);
- ``--enable-cache-report``: ``usage.prompt_tokens_details.cached_tokens`` in OpenAI
  responses (the native ``/generate`` always has ``meta_info.cached_tokens``).

``sglang:prompt_tokens_total`` counts every prompt token of finished requests, cached
ones included; ``sglang:cached_tokens_total`` the cached ones, split by
``cache_source`` (device/host/storage) in recent versions, summed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvroute.engines.base import (
    CacheCounters,
    CacheResetOutcome,
    KvCapacity,
    Load,
    ResponseCacheUsage,
    SlotView,
    UsageSource,
)
from kvroute.engines.http import (
    EngineHTTPError,
    HttpEngine,
    as_mapping,
    counter_value,
    get_json,
    get_metrics,
    int_field,
    openai_usage,
    optional_int_field,
    request,
)
from kvroute.engines.metrics_text import Metrics
from kvroute.errors import EngineError
from kvroute.types import JSONValue

PROMPT_TOTAL = "sglang:prompt_tokens_total"
CACHED_TOTAL = "sglang:cached_tokens_total"
RUNNING_REQS = "sglang:num_running_reqs"
QUEUE_REQS = "sglang:num_queue_reqs"

METRICS_HINT = "start SGLang with --enable-metrics"


@dataclass(frozen=True, slots=True)
class SglangServerSettings:
    """The radix-cache settings a running server reports in ``/get_server_info``, as
    SGLang spells them (``radix_eviction_policy``, ``schedule_policy``)."""

    capacity: KvCapacity
    radix_eviction_policy: str
    schedule_policy: str
    max_running_requests: int | None
    """The server's limit when it was given one (``--max-running-requests``)."""


class SglangAdapter(HttpEngine):
    """One SGLang server at ``base_url``, reached through ``client``."""

    ENGINE = "sglang"

    async def load(self) -> Load:
        metrics = await self._metrics()
        running = counter_value(metrics, RUNNING_REQS)
        waiting = counter_value(metrics, QUEUE_REQS)
        if running is None or waiting is None:
            raise EngineError(f"{self._base_url}/metrics has no {RUNNING_REQS}", hint=METRICS_HINT)
        return Load(num_running=running, num_waiting=waiting)

    async def kv_capacity(self) -> KvCapacity:
        return (await self.server_settings()).capacity

    async def server_settings(self) -> SglangServerSettings:
        """The pool and radix-cache settings from ``/get_server_info``."""
        url = f"{self._base_url}/get_server_info"
        return server_settings_from_info(await get_json(self._client, url))

    async def cache_counters(self) -> CacheCounters:
        return cache_counters_from_metrics(await self._metrics())

    def response_cache_usage(self, body: Mapping[str, JSONValue]) -> ResponseCacheUsage | None:
        return response_cache_usage(body)

    async def slots(self) -> list[SlotView] | None:
        """SGLang has no slots: its cache is one radix tree over a token pool."""
        return None

    async def reset_cache(self) -> CacheResetOutcome:
        """``POST /flush_cache``; SGLang refuses (400) while requests run or wait."""
        try:
            await request(self._client, "POST", f"{self._base_url}/flush_cache", timeout_s=60.0)
        except EngineHTTPError as exc:
            if exc.status_code == 400:
                raise EngineError(
                    f"{self._base_url} did not flush its cache: requests are in flight",
                    hint="wait until the server is idle, then reset again",
                ) from None
            raise
        return CacheResetOutcome.RESET

    async def _metrics(self) -> Metrics:
        try:
            return await get_metrics(self._client, self._base_url)
        except EngineHTTPError as exc:
            if exc.status_code == 404:
                raise EngineError(
                    f"{self._base_url} serves no /metrics", hint=METRICS_HINT
                ) from None
            raise


def cache_counters_from_metrics(metrics: Metrics) -> CacheCounters:
    """Prompt and cached token totals, each summed over all its label sets."""
    prompt = counter_value(metrics, PROMPT_TOTAL)
    if prompt is None:
        raise EngineError(f"scrape has no {PROMPT_TOTAL}", hint=METRICS_HINT)
    # A server that has cached nothing yet may not have created the labelled series.
    cached = counter_value(metrics, CACHED_TOTAL)
    return CacheCounters(prompt_tokens=prompt, cached_tokens=0 if cached is None else cached)


def kv_capacity_from_server_info(body: JSONValue) -> KvCapacity:
    """``max_total_num_tokens`` (token pool size) and ``page_size`` from
    ``/get_server_info``; older versions put the pool size only in ``internal_states``."""
    where = "/get_server_info"
    info = as_mapping(body, where)
    total = optional_int_field(info, "max_total_num_tokens", where)
    if total is None:
        states = info.get("internal_states")
        if isinstance(states, list) and states:
            total = int_field(
                as_mapping(states[0], f"{where} internal_states[0]"), "max_total_num_tokens", where
            )
    if total is None:
        raise EngineError(f"{where} has no max_total_num_tokens")
    page_size = optional_int_field(info, "page_size", where) or 1
    return KvCapacity(block_size_tokens=page_size, num_blocks=total // page_size)


def server_settings_from_info(body: JSONValue) -> SglangServerSettings:
    """:func:`kv_capacity_from_server_info` and the radix-cache settings beside it;
    absent ones read as SGLang's defaults (``lru``, ``fcfs``)."""
    where = "/get_server_info"
    info = as_mapping(body, where)
    eviction = info.get("radix_eviction_policy", "lru")
    schedule = info.get("schedule_policy", "fcfs")
    if not isinstance(eviction, str) or not isinstance(schedule, str):
        raise EngineError(f"{where}: radix_eviction_policy/schedule_policy are not names")
    return SglangServerSettings(
        capacity=kv_capacity_from_server_info(info),
        radix_eviction_policy=eviction,
        schedule_policy=schedule,
        max_running_requests=optional_int_field(info, "max_running_requests", where),
    )


def response_cache_usage(body: Mapping[str, Any]) -> ResponseCacheUsage | None:
    """OpenAI ``usage`` (needs ``--enable-cache-report``), or native ``meta_info``."""
    usage = openai_usage(body)
    if usage is not None:
        return ResponseCacheUsage(
            prompt_tokens=usage[0], cached_tokens=usage[1], source=UsageSource.OPENAI_USAGE
        )
    meta = body.get("meta_info")
    if isinstance(meta, Mapping) and "cached_tokens" in meta and "prompt_tokens" in meta:
        return ResponseCacheUsage(
            prompt_tokens=int_field(meta, "prompt_tokens", "meta_info"),
            cached_tokens=int_field(meta, "cached_tokens", "meta_info"),
            source=UsageSource.SGLANG_META_INFO,
        )
    return None
