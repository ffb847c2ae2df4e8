"""The gateway in front of a real SGLang-CPU server, driven by the ``openai`` SDK.

SmolLM2-135M's chat template has no tool calling and the server runs without a
``--tool-call-parser``, so the tools test checks that tool requests and tool history pass
through, are classified and get a valid answer. Structured output is constrained by
SGLang's default grammar backend on CPU, xgrammar. Answers are kept a few tokens long:
plain-torch decoding on a busy 2-core machine takes ~0.1–3 s a token.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from gateway.harness import LoopThread, running_gateway
from kvroute.engines.sglang import SglangAdapter
from kvroute.engines.state import EngineRecord

pytestmark = [pytest.mark.engine, pytest.mark.sglang]

USER: Any = [{"role": "user", "content": "Name one colour."}]
# A short enum keeps the constrained answer complete within max_tokens.
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["colour"],
}


def _config(r: EngineRecord) -> str:
    return (
        f"backends:\n  - {{name: {r.name}, url: '{r.base_url}', engine: sglang, "
        f"model: {r.model_name}}}\n"
    )


def test_sdk_stream_non_stream_and_metrics(
    loop_thread: LoopThread, sglang_server: EngineRecord
) -> None:
    r = sglang_server
    with running_gateway(loop_thread, _config(r)) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        models = [m.id for m in client.models.list()]
        full = client.chat.completions.create(model=r.model_name, messages=USER, max_tokens=4)
        chunks = list(
            client.chat.completions.create(
                model=r.model_name, messages=USER, max_tokens=4, stream=True
            )
        )
        completion = client.completions.create(
            model=r.model_name, prompt="The sky is", max_tokens=3
        )
        metrics = httpx.get(f"{gw.url}/metrics").text
    assert models == [r.model_name]
    assert full.choices[0].message.content and full.usage is not None
    assert 0 < full.usage.completion_tokens <= 4
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert all(c.usage is None for c in chunks)
    assert completion.choices[0].text
    assert f'kvroute:backend_up{{backend="{r.name}",pool="default",engine="sglang"}} 1' in metrics


def test_sdk_response_format_and_tools(
    loop_thread: LoopThread, sglang_server: EngineRecord
) -> None:
    r = sglang_server
    tools: Any = [{"type": "function", "function": {"name": "paint", "parameters": SCHEMA}}]
    with running_gateway(loop_thread, _config(r)) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        structured = client.chat.completions.with_raw_response.create(
            model=r.model_name,
            messages=USER,
            max_tokens=64,  # xgrammar lets the model put newlines in the JSON
            temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}},
        )
        tool = client.chat.completions.with_raw_response.create(
            model=r.model_name, messages=USER, max_tokens=4, tools=tools
        )
        history: Any = [
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "paint", "arguments": '{"colour": "red"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "painted"},
        ]
        followup = client.chat.completions.with_raw_response.create(
            model=r.model_name, messages=history, max_tokens=4, tools=tools
        )
    assert structured.headers["x-kvroute-class"] == "structured"
    answer = json.loads(structured.parse().choices[0].message.content or "{}")
    assert answer["colour"] in ("red", "green", "blue")
    assert tool.headers["x-kvroute-class"] == "tools"
    assert tool.parse().choices[0].message is not None
    assert followup.headers["x-kvroute-class"] == "tools"
    assert followup.parse().choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_gateway_reads_sglang_cache_usage(
    loop_thread: LoopThread, sglang_server: EngineRecord
) -> None:
    """A repeated prompt through the gateway: the answer's cached tokens are SGLang's."""
    r = sglang_server

    async def flush() -> None:
        async with httpx.AsyncClient() as http:
            await SglangAdapter(r.base_url, client=http).reset_cache()

    asyncio.run(flush())
    system = "You answer in one word. " + " ".join(f"Fact {i} is true." for i in range(40))
    messages: Any = [{"role": "system", "content": system}, *USER]
    with running_gateway(loop_thread, _config(r)) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        first = client.chat.completions.create(model=r.model_name, messages=messages, max_tokens=2)
        second = client.chat.completions.create(model=r.model_name, messages=messages, max_tokens=2)
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens - 1
