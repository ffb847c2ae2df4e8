"""The llama.cpp adapter: pure readings of recorded shapes, then a real llama-server."""

from __future__ import annotations

import asyncio
import uuid
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
from kvroute.engines.llamacpp import (
    LlamaCppAdapter,
    cache_counters_from_metrics,
    response_cache_usage,
    slots_from_json,
)
from kvroute.engines.metrics_text import parse_metrics
from kvroute.engines.state import EngineRecord
from kvroute.errors import EngineError

# -- pure: the three kinds of llama.cpp build ------------------------------------------


def test_counters_of_a_build_whose_total_excludes_cached_tokens() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, "
        "excluding cached tokens\n"
        "llamacpp:prompt_tokens_total 45\n"
        "llamacpp:prompt_tokens_cached_total 43\n"
    )
    assert cache_counters_from_metrics(parse_metrics(text)) == CacheCounters(88, 43)


def test_counters_of_a_build_whose_total_includes_cached_tokens() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens, including cached ones\n"
        "llamacpp:prompt_tokens_total 88\n"
        "llamacpp:prompt_tokens_cached_total 43\n"
    )
    assert cache_counters_from_metrics(parse_metrics(text)) == CacheCounters(88, 43)


def test_counters_of_a_build_without_a_cached_counter() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
        "llamacpp:prompt_tokens_total 45\n"
    )
    assert cache_counters_from_metrics(parse_metrics(text)) == CacheCounters(None, None)


def test_counters_need_metrics() -> None:
    with pytest.raises(EngineError, match="--metrics"):
        cache_counters_from_metrics(parse_metrics("other 1\n"))


def test_response_usage_prefers_timings_then_openai_usage() -> None:
    body: dict[str, Any] = {
        "usage": {"prompt_tokens": 44, "prompt_tokens_details": {"cached_tokens": 43}},
        "timings": {"cache_n": 43, "prompt_n": 1},
    }
    usage = response_cache_usage(body)
    assert usage is not None
    assert (usage.prompt_tokens, usage.cached_tokens, usage.source) == (
        44,
        43,
        UsageSource.LLAMACPP_TIMINGS,
    )
    del body["timings"]
    usage = response_cache_usage(body)
    assert usage is not None
    assert usage.source is UsageSource.OPENAI_USAGE
    assert usage.cached_tokens == 43
    assert response_cache_usage({"usage": {"prompt_tokens": 3}}) is None
    assert response_cache_usage({"choices": []}) is None


def test_slots_json() -> None:
    body = [
        {"id": 0, "n_ctx": 2048, "is_processing": False},
        {"id": 1, "n_ctx": 2048, "is_processing": True, "n_prompt_tokens": 51},
    ]
    views = slots_from_json(body)
    assert [(v.slot_id, v.slot_len_tokens, v.is_processing, v.num_tokens_held) for v in views] == [
        (0, 2048, False, None),
        (1, 2048, True, 51),
    ]
    with pytest.raises(EngineError):
        slots_from_json({"not": "a list"})


# -- live: a real llama-server ---------------------------------------------------------

MODEL = "SmolLM2-135M-Instruct"


async def chat(
    client: httpx.AsyncClient, base_url: str, system: str, user: str, max_tokens: int = 8
) -> dict[str, Any]:
    response = await client.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
        timeout=120,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def unique_system_prompt() -> str:
    return (
        f"Session {uuid.uuid4().hex}. You are a careful assistant who answers questions "
        "about geography in detail, citing sources and giving historical context."
    )


@pytest.mark.engine
@pytest.mark.llamacpp
def test_health_models_capacity_and_idle_load(llamacpp_server: EngineRecord) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = LlamaCppAdapter(llamacpp_server.base_url, client=client)
            assert (await adapter.health()).state is HealthState.READY
            assert await adapter.models() == [MODEL]
            assert await adapter.kv_capacity() == KvCapacity(
                block_size_tokens=1, num_blocks=4 * 2048, num_slots=4, slot_len_tokens=2048
            )
            assert await adapter.load() == Load(num_running=0, num_waiting=0)
            slots = await adapter.slots()
            assert [s.slot_id for s in slots] == [0, 1, 2, 3]
            assert all(s.slot_len_tokens == 2048 for s in slots)

    asyncio.run(check())


@pytest.mark.engine
@pytest.mark.llamacpp
def test_repeated_prompt_moves_all_three_readings(llamacpp_server: EngineRecord) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = LlamaCppAdapter(llamacpp_server.base_url, client=client)
            assert await adapter.reset_cache() is CacheResetOutcome.RESET
            system = unique_system_prompt()
            before = await adapter.cache_counters()

            first = adapter.response_cache_usage(
                await chat(client, adapter.base_url, system, "Capital of Peru?")
            )
            assert first is not None
            prompt_len = first.prompt_tokens
            assert prompt_len > 30
            assert first.cached_tokens == 0
            after_first = await adapter.cache_counters()
            assert after_first.since(before) == CacheCounters(prompt_len, 0)

            body = await chat(client, adapter.base_url, system, "Capital of Peru?")
            second = adapter.response_cache_usage(body)
            assert second is not None
            # llama.cpp always recomputes the last prompt token to get logits.
            assert (second.prompt_tokens, second.cached_tokens) == (prompt_len, prompt_len - 1)
            assert second.source is UsageSource.LLAMACPP_TIMINGS
            # The OpenAI usage block of the same response agrees.
            usage = body["usage"]
            assert usage["prompt_tokens_details"]["cached_tokens"] == prompt_len - 1
            after_second = await adapter.cache_counters()
            assert after_second.since(after_first) == CacheCounters(prompt_len, prompt_len - 1)

            held = [s.num_tokens_held for s in await adapter.slots() if s.num_tokens_held]
            assert len(held) == 1
            assert prompt_len <= held[0] <= prompt_len + 8

            # A cold start again: nothing held, nothing reused.
            assert await adapter.reset_cache() is CacheResetOutcome.RESET
            assert all(not s.num_tokens_held for s in await adapter.slots())
            third = adapter.response_cache_usage(
                await chat(client, adapter.base_url, system, "Capital of Peru?")
            )
            assert third is not None
            assert third.cached_tokens == 0

    asyncio.run(check())


@pytest.mark.engine
@pytest.mark.llamacpp
def test_load_counts_a_running_request(llamacpp_server: EngineRecord) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            adapter = LlamaCppAdapter(llamacpp_server.base_url, client=client)
            request = asyncio.create_task(
                chat(client, adapter.base_url, unique_system_prompt(), "Tell a long story.", 48)
            )
            seen: list[Load] = []
            while not request.done():
                seen.append(await adapter.load())
                await asyncio.sleep(0.02)
            await request
            assert Load(num_running=1, num_waiting=0) in seen
            assert await adapter.load() == Load(num_running=0, num_waiting=0)

    asyncio.run(check())


@pytest.mark.engine
@pytest.mark.llamacpp
def test_replicas_have_separate_caches(llamacpp_pool: list[EngineRecord]) -> None:
    async def check() -> None:
        async with httpx.AsyncClient() as client:
            one, two = (LlamaCppAdapter(r.base_url, client=client) for r in llamacpp_pool)
            assert one.base_url != two.base_url
            system = unique_system_prompt()
            await chat(client, one.base_url, system, "Capital of Chile?")
            warm = one.response_cache_usage(
                await chat(client, one.base_url, system, "Capital of Chile?")
            )
            cold = two.response_cache_usage(
                await chat(client, two.base_url, system, "Capital of Chile?")
            )
            assert warm is not None and cold is not None
            assert warm.cached_tokens == warm.prompt_tokens - 1
            assert cold.cached_tokens < 10  # at most the shared chat-template opening

    asyncio.run(check())
