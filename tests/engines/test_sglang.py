"""The SGLang adapter against answers shaped as SGLang documents them.

No SGLang build runs on these CPU-only machines, so nothing here touches a real SGLang
server: these tests pin the adapter to SGLang's documented metric names
(srt/metrics/collector.py, docs/references/production_metrics.md), its /get_server_info
fields and its /generate meta_info, served by an httpx MockTransport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from kvroute.engines.base import CacheCounters, CacheResetOutcome, HealthState, KvCapacity, Load
from kvroute.engines.metrics_text import parse_metrics
from kvroute.engines.sglang import (
    SglangAdapter,
    cache_counters_from_metrics,
    kv_capacity_from_server_info,
    response_cache_usage,
)
from kvroute.errors import EngineError

METRICS = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",is_streaming="false"} 700.0
sglang:prompt_tokens_total{model_name="m",is_streaming="true"} 300.0
sglang:cached_tokens_total{model_name="m",cache_source="device"} 600.0
sglang:cached_tokens_total{model_name="m",cache_source="host"} 50.0
sglang:num_running_reqs{model_name="m"} 3.0
sglang:num_queue_reqs{model_name="m"} 1.0
"""


def test_counters_sum_every_label_set() -> None:
    assert cache_counters_from_metrics(parse_metrics(METRICS)) == CacheCounters(1000, 650)


def test_a_server_that_cached_nothing_yet_reads_zero_cached() -> None:
    text = 'sglang:prompt_tokens_total{model_name="m"} 12.0\n'
    assert cache_counters_from_metrics(parse_metrics(text)) == CacheCounters(12, 0)
    with pytest.raises(EngineError, match="--enable-metrics"):
        cache_counters_from_metrics(parse_metrics("other 1\n"))


def test_capacity_from_server_info_old_and_new_layouts() -> None:
    assert kv_capacity_from_server_info({"max_total_num_tokens": 161721, "page_size": 1}) == (
        KvCapacity(block_size_tokens=1, num_blocks=161721)
    )
    nested = {"page_size": 16, "internal_states": [{"max_total_num_tokens": 1600}]}
    assert kv_capacity_from_server_info(nested) == KvCapacity(block_size_tokens=16, num_blocks=100)
    with pytest.raises(EngineError):
        kv_capacity_from_server_info({"page_size": 1})


def test_response_usage_openai_and_native() -> None:
    openai = {"usage": {"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 48}}}
    native = {"text": "x", "meta_info": {"prompt_tokens": 50, "cached_tokens": 49}}
    first, second = response_cache_usage(openai), response_cache_usage(native)
    assert first is not None and second is not None
    assert (first.cached_tokens, second.cached_tokens) == (48, 49)
    assert response_cache_usage({"usage": {"prompt_tokens": 50}}) is None


def _adapter(
    handler: Callable[[httpx.Request], httpx.Response],
) -> tuple[SglangAdapter, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return SglangAdapter("http://sglang.test:30000", client=client), client


def test_endpoints_through_the_client_seam() -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        routes = {
            "/health": httpx.Response(200),
            "/metrics": httpx.Response(200, text=METRICS),
            "/v1/models": httpx.Response(200, json={"data": [{"id": "m"}]}),
            "/get_server_info": httpx.Response(
                200, json={"max_total_num_tokens": 64, "page_size": 1}
            ),
            "/flush_cache": httpx.Response(200, text="Cache flushed."),
        }
        return routes.get(request.url.path, httpx.Response(404))

    async def run() -> None:
        adapter, client = _adapter(handler)
        async with client:
            assert (await adapter.health()).state is HealthState.READY
            assert await adapter.models() == ["m"]
            assert await adapter.load() == Load(num_running=3, num_waiting=1)
            assert (await adapter.kv_capacity()).total_tokens == 64
            assert await adapter.cache_counters() == CacheCounters(1000, 650)
            assert await adapter.slots() is None
            assert await adapter.reset_cache() is CacheResetOutcome.RESET

    asyncio.run(run())
    assert ("POST", "/flush_cache") in seen


def test_busy_flush_and_unreachable_server() -> None:
    async def run() -> None:
        adapter, client = _adapter(lambda request: httpx.Response(400, text="not flushed"))
        async with client:
            with pytest.raises(EngineError, match="in flight"):
                await adapter.reset_cache()
            assert (await adapter.health()).state is HealthState.UNHEALTHY

        def refuse(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("refused", request=request)

        adapter, client = _adapter(refuse)
        async with client:
            assert (await adapter.health()).state is HealthState.UNREACHABLE
            with pytest.raises(EngineError, match="failed"):
                await adapter.models()

    asyncio.run(run())
