"""Cache-aware routing over two real SGLang-CPU replicas: the gateway's radix view of each
replica predicts, request by request, exactly the cached tokens SGLang reports.

Four chat sessions, each with its own ~200-token system prompt, take three turns in
interleaved order (turn 1 of every session, then turn 2, ...), one request at a time, each
asking for one token (no generated token gets KV, so the view's pseudo output is exact).
The view is SGLang's radix model with the replicas' settings (``cache:
{capacity_tokens}`` = ``--max-total-tokens``, page size 1, LRU) on the served model's own
tokenizer (``tokenizer:``, the HF directory SGLang loads). Figures are the replicas'
per-response ``cached_tokens``, not the gateway's.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import httpx
import pytest

from engine_fixtures import SGLANG_OPTIONS
from gateway.harness import LoopThread, running_gateway
from kvroute.engines.sglang import SglangAdapter
from kvroute.engines.state import EngineRecord
from kvroute.engines.vllm_paths import vllm_model_dir

pytestmark = [pytest.mark.engine, pytest.mark.sglang]

NUM_SESSIONS = 4
NUM_TURNS = 3


def _schedule(tag: str) -> list[list[dict[str, str]]]:
    systems = [f"{tag} Desk {s}. " + f"Answer about topic {s} briefly. " * 30 for s in range(4)]
    prompts = []
    for turn in range(NUM_TURNS):
        for s in range(NUM_SESSIONS):
            messages = [{"role": "system", "content": systems[s]}]
            messages += [
                {"role": "user", "content": f"Question {k} of session {s}?"}
                for k in range(turn + 1)
            ]
            prompts.append(messages)
    return prompts


def test_predicted_equals_reported_per_request(
    loop_thread: LoopThread, sglang_pool: list[EngineRecord]
) -> None:
    async def flush() -> None:
        async with httpx.AsyncClient() as client:
            for r in sglang_pool:
                await SglangAdapter(r.base_url, client=client).reset_cache()

    asyncio.run(flush())  # start from empty trees, as the views do
    pool = SGLANG_OPTIONS.sglang_max_total_tokens
    backends = "".join(
        f"  - {{name: {r.name}, url: '{r.base_url}', engine: sglang, model: {r.model_name}, "
        f"cache: {{capacity_tokens: {pool}}}}}\n"
        for r in sglang_pool
    )
    config = (
        f"tokenizer: '{vllm_model_dir()}'\nbackends:\n{backends}"
        "routes: [{name: r, pool: default, policy: cache_aware}]\n"
    )
    rows: list[tuple[str, int, int, int]] = []  # (backend, prompt tokens, predicted, reported)
    with (
        running_gateway(loop_thread, config) as gw,
        httpx.Client(base_url=gw.url, timeout=600) as client,
    ):
        for messages in _schedule(f"Run {random.randrange(10**9)}."):
            body = {"model": sglang_pool[0].model_name, "messages": messages,
                    "max_tokens": 1, "temperature": 0}  # fmt: skip
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            # cache_aware prompt=N hit=a:H,b:H -> a
            words = r.headers["x-kvroute-route"].split()
            chosen = words[-1]
            hits = dict(h.split(":") for h in words[2].removeprefix("hit=").split(","))
            reported = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            rows.append(
                (chosen, int(words[1].removeprefix("prompt=")), int(hits[chosen]), reported)
            )
    print("backend, prompt, predicted, reported:", rows)
    assert [p for _, _, p, _ in rows] == [c for _, _, _, c in rows]
    # Both replicas were used, and each session's later turns hit its own replica.
    assert len(Counter(b for b, *_ in rows)) == 2
    later = rows[NUM_SESSIONS:]
    assert all(c > 0.8 * n for _, n, _, c in later)
