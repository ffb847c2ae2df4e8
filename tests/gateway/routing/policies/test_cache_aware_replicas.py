"""Cache-aware routing on 4 real llama-server replicas of 2 slots each, against round
robin: the engines' own cached-token counters, and how evenly the requests spread.

Both policies replay the same multi-turn schedule -- 7 chat sessions, each with its own
system prompt, taking turns one after another (turn 1 of every session, then turn 2,
...) -- one request at a time so the outcome does not depend on the machine's speed,
each from erased slots. 7 sessions fit in the 8 slots only if each replica keeps the
sessions it already served; round robin sends a session's next turn to another replica
every time (7 and 4 share no factor). Figures come from the replicas' ``/metrics``, not
from the gateway's predictions.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from engine_fixtures import EnginePools
from gateway.harness import LoopThread, running_gateway
from kvroute.bench.workloads.base import GenContext
from kvroute.engines.http import get_metrics
from kvroute.engines.launch import LaunchOptions
from kvroute.engines.llamacpp import LlamaCppAdapter, cache_counters_from_metrics
from kvroute.engines.state import EngineRecord
from kvroute.trace.tokenizer import load_tokenizer

NUM_REPLICAS = 4
SLOTS = 2
CTX_TOKENS = 1024
NUM_SESSIONS = 7
NUM_TURNS = 5
OPTIONS = LaunchOptions(parallel=SLOTS, ctx_tokens=CTX_TOKENS, threads=1)


@pytest.fixture
def replicas(engine_pools: EnginePools) -> list[EngineRecord]:
    return engine_pools.get("llamacpp", NUM_REPLICAS, OPTIONS)


async def _erase_and_read(records: Sequence[EngineRecord], erase: bool) -> tuple[int, int]:
    """Erase every slot (when asked), then the summed (prompt, cached) token counters."""
    prompt = cached = 0
    async with httpx.AsyncClient() as client:
        for rec in records:
            if erase:
                await LlamaCppAdapter(rec.base_url, client=client).reset_cache()
            counters = cache_counters_from_metrics(await get_metrics(client, rec.base_url))
            assert counters.prompt_tokens is not None and counters.cached_tokens is not None
            prompt += counters.prompt_tokens
            cached += counters.cached_tokens
    return prompt, cached


def interleaved_sessions(seed: int) -> list[list[dict[str, str]]]:
    """Message lists, in sending order: turn t of every session, then turn t + 1.
    The history carries a fixed answer text (not the engine's), as ``multiturn`` does."""
    text = GenContext.seeded(load_tokenizer(), seed).text
    histories = [
        [{"role": "system", "content": f"You are assistant {s}. {text.tokens(96)}"}]
        for s in range(NUM_SESSIONS)
    ]
    out: list[list[dict[str, str]]] = []
    for _turn in range(NUM_TURNS):
        for history in histories:
            history.append({"role": "user", "content": text.tokens(20)})
            out.append([dict(m) for m in history])
            history.append({"role": "assistant", "content": text.tokens(30)})
    return out


def _replay(url: str, prompts: Sequence[list[dict[str, str]]], model: str) -> Counter[str]:
    """Send every prompt in order; the number of requests each backend served."""
    served: Counter[str] = Counter()
    with httpx.Client(base_url=url, timeout=120) as client:
        for messages in prompts:
            body: dict[str, Any] = {"model": model, "messages": messages}
            body |= {"max_tokens": 4, "temperature": 0}
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            served[r.headers["x-kvroute-backend"]] += 1
    return served


@pytest.mark.engine
@pytest.mark.llamacpp
def test_cache_aware_doubles_round_robins_engine_hit_with_balanced_load(
    loop_thread: LoopThread, replicas: list[EngineRecord]
) -> None:
    prompts = interleaved_sessions(seed=11)
    backends = "".join(
        f"  - {{name: r{i}, url: '{r.base_url}', engine: llamacpp, "
        f"cache: {{slots: {SLOTS}, capacity_tokens: {SLOTS * CTX_TOKENS}, cache_ram_mib: 0}}}}\n"
        for i, r in enumerate(replicas)
    )
    hit: dict[str, float] = {}
    imbalance: dict[str, float] = {}
    for policy in ("round_robin", "cache_aware"):
        before = asyncio.run(_erase_and_read(replicas, erase=True))
        config = f"backends:\n{backends}routes: [{{name: r, pool: default, policy: {policy}}}]\n"
        with running_gateway(loop_thread, config) as gw:
            served = _replay(gw.url, prompts, replicas[0].model_name)
        after = asyncio.run(_erase_and_read(replicas, erase=False))
        hit[policy] = (after[1] - before[1]) / (after[0] - before[0])
        counts = [served[f"r{i}"] for i in range(NUM_REPLICAS)]
        imbalance[policy] = max(counts) / statistics.fmean(counts)
        print(f"{policy}: engine-reported hit {hit[policy]:.1%}, requests per replica {counts}")
    assert hit["cache_aware"] >= 2 * hit["round_robin"], hit
    assert hit["cache_aware"] > 0.5, hit  # most of each follow-up turn comes from cache
    assert imbalance["cache_aware"] <= 1.5, imbalance
