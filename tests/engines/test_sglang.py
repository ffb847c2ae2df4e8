"""The SGLang adapter: pure readings of recorded shapes, then a real SGLang-CPU server.

The recorded shapes (an httpx MockTransport) pin the parsing, including answers a live
server will not give on demand (a refused flush, an older /get_server_info layout); the
live tests check the same readings on SGLang 0.5.23's own server
(``scripts/install-engines sglang``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from kvroute.engines.base import (
    CacheCounters,
    CacheResetOutcome,
    HealthState,
    KvCapacity,
    Load,
    UsageSource,
)
from kvroute.engines.metrics_text import parse_metrics
from kvroute.engines.sglang import (
    SglangAdapter,
    SglangServerSettings,
    cache_counters_from_metrics,
    kv_capacity_from_server_info,
    response_cache_usage,
    server_settings_from_info,
)
from kvroute.engines.state import EngineRecord
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


def test_server_settings_as_sglang_0_5_23_reports_them() -> None:
    # Abridged from a real 0.5.23 /get_server_info (server args at the top level).
    info = {
        "max_total_num_tokens": 2048,
        "page_size": 1,
        "radix_eviction_policy": "lru",
        "schedule_policy": "fcfs",
        "max_running_requests": 4,
        "internal_states": [{"max_total_num_tokens": 2048}],
        "version": "0.5.23",
    }
    assert server_settings_from_info(info) == SglangServerSettings(
        KvCapacity(block_size_tokens=1, num_blocks=2048), "lru", "fcfs", 4
    )
    unlimited = server_settings_from_info({"max_total_num_tokens": 64, "page_size": 16})
    assert (unlimited.radix_eviction_policy, unlimited.max_running_requests) == ("lru", None)
    with pytest.raises(EngineError, match="names"):
        server_settings_from_info({"max_total_num_tokens": 64, "schedule_policy": 3})


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


# -- live: a real SGLang-CPU server ----------------------------------------------------

MODEL = "SmolLM2-135M-Instruct"
POOL_TOKENS = 2048  # tests/engine_fixtures.py SGLANG_OPTIONS


async def chat(client: httpx.AsyncClient, base_url: str, system: str, user: str) -> dict[str, Any]:
    response = await client.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 4,
            "temperature": 0,
        },
        timeout=600,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.engine
@pytest.mark.sglang
def test_live_health_models_capacity_and_idle_load(sglang_server: EngineRecord) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = SglangAdapter(sglang_server.base_url, client=client)
            assert (await adapter.health()).state is HealthState.READY
            assert await adapter.models() == [MODEL]
            # /get_server_info: the pool is exactly --max-total-tokens, page size 1.
            assert await adapter.kv_capacity() == KvCapacity(
                block_size_tokens=1, num_blocks=POOL_TOKENS
            )
            assert await adapter.load() == Load(num_running=0, num_waiting=0)
            assert await adapter.slots() is None

    asyncio.run(check())


@pytest.mark.engine
@pytest.mark.sglang
def test_live_repeated_long_prompt_is_cached_and_zero_after_reset(
    sglang_server: EngineRecord,
) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = SglangAdapter(sglang_server.base_url, client=client)
            assert await adapter.reset_cache() is CacheResetOutcome.RESET
            system = f"Session {uuid.uuid4().hex}. " + " ".join(
                f"Rule {i}: be precise about fact {i} and say why." for i in range(120)
            )
            before = await adapter.cache_counters()

            first = adapter.response_cache_usage(await chat(client, adapter.base_url, system, "Hi"))
            assert first is not None and first.source is UsageSource.OPENAI_USAGE
            prompt_len = first.prompt_tokens
            assert prompt_len > 1500
            assert first.cached_tokens == 0
            after_first = await adapter.cache_counters()
            assert after_first.since(before) == CacheCounters(prompt_len, 0)

            second = adapter.response_cache_usage(
                await chat(client, adapter.base_url, system, "Hi")
            )
            assert second is not None
            # A token-level radix tree: everything but the last prompt token is reused.
            assert (second.prompt_tokens, second.cached_tokens) == (prompt_len, prompt_len - 1)
            after_second = await adapter.cache_counters()
            assert after_second.since(after_first) == CacheCounters(prompt_len, prompt_len - 1)

            assert await adapter.reset_cache() is CacheResetOutcome.RESET
            third = adapter.response_cache_usage(await chat(client, adapter.base_url, system, "Hi"))
            assert third is not None
            assert (third.prompt_tokens, third.cached_tokens) == (prompt_len, 0)

    asyncio.run(check())
