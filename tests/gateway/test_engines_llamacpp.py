"""The gateway in front of real llama-server, driven by the official ``openai`` SDK.

Shared fixture engines for what leaves them intact; engines of its own for the tests
that kill one. SmolLM2-135M's chat template has no tool calling, so the tools test
checks that tool requests and tool history pass through, are classified and get a
valid answer; it cannot make this model emit a tool call.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.harness import LoopThread, running_gateway
from kvroute.engines.launch import LaunchOptions
from kvroute.engines.llamacpp import LlamaCppAdapter
from kvroute.engines.local import LocalEngines
from kvroute.engines.process import Lifetime
from kvroute.engines.state import EngineRecord, StateDir
from kvroute.gateway.backends.breaker import BreakerState

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp]

MODEL = "SmolLM2-135M-Instruct"
USER: Any = [{"role": "user", "content": "Name one colour."}]


def backends_yaml(records: list[EngineRecord], pools: list[str] | None = None) -> str:
    pools = pools or ["default"] * len(records)
    return "".join(
        f"  - {{name: {r.name}, url: '{r.base_url}', engine: llamacpp, model: {r.model_name}, pool: {p}}}\n"
        for r, p in zip(records, pools, strict=True)
    )


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_sdk_stream_non_stream_completions(
    loop_thread: LoopThread, llamacpp_server: EngineRecord
) -> None:
    config = f"backends:\n{backends_yaml([llamacpp_server])}"
    with running_gateway(loop_thread, config) as gw:
        client = sdk(gw.url)
        models = [m.id for m in client.models.list()]
        full = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8)
        chunks = list(
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, stream=True)
        )
        with_usage = list(
            client.chat.completions.create(
                model=MODEL,
                messages=USER,
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        completion = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=5)
        streamed_completion = list(
            client.completions.create(model=MODEL, prompt="The sky is", max_tokens=5, stream=True)
        )
        metrics = httpx.get(f"{gw.url}/metrics").text
    assert models == [MODEL]
    assert full.choices[0].message.content and full.usage and 0 < full.usage.completion_tokens <= 8
    assert all(c.usage is None for c in chunks)  # usage added upstream, removed again
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert with_usage[-1].usage is not None and 0 < with_usage[-1].usage.completion_tokens <= 8
    assert completion.choices[0].text
    assert all(c.usage is None for c in streamed_completion)
    assert (
        f'kvroute:engine_cached_prompt_tokens_total{{backend="{llamacpp_server.name}",engine="llamacpp"}}'
        in metrics
    )
    assert "kvroute:time_to_first_token_seconds_bucket" in metrics


def test_sdk_response_format_and_tools(
    loop_thread: LoopThread, llamacpp_server: EngineRecord
) -> None:
    config = f"backends:\n{backends_yaml([llamacpp_server])}"
    # A short enum keeps the constrained answer complete within max_tokens whatever the
    # sampler does (a free string could run past the limit and leave the JSON cut off).
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
        "required": ["colour"],
    }
    tools: Any = [{"type": "function", "function": {"name": "paint", "parameters": schema}}]
    with running_gateway(loop_thread, config) as gw:
        client = sdk(gw.url)
        structured = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=USER,
            max_tokens=64,
            temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
        tool = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=USER,
            max_tokens=8,
            tools=tools,
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
            model=MODEL,
            messages=history,
            max_tokens=8,
            tools=tools,
        )
    assert structured.headers["x-kvroute-class"] == "structured"
    answer = json.loads(structured.parse().choices[0].message.content or "{}")
    assert answer["colour"] in ("red", "green", "blue")
    assert tool.headers["x-kvroute-class"] == "tools"
    assert tool.parse().choices[0].message is not None
    assert followup.headers["x-kvroute-class"] == "tools"
    assert followup.parse().choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_model_and_class_routing(
    loop_thread: LoopThread, llamacpp_pool: list[EngineRecord]
) -> None:
    a, b = llamacpp_pool
    config = f"""
backends:
{backends_yaml([a, b], ["grammar", "chat"])}
routes:
  - {{name: structured, match: {{class: structured}}, pool: grammar}}
  - {{name: alias-b, match: {{model: small-b}}, pool: chat, upstream_model: {MODEL}}}
  - {{name: rest, pool: chat, policy: session_affinity}}
"""
    with running_gateway(loop_thread, config) as gw:
        client = sdk(gw.url)

        def backend_of(**kw: Any) -> str:
            raw: Any = client.chat.completions.with_raw_response.create(max_tokens=4, **kw)
            raw.parse()
            return str(raw.headers["x-kvroute-backend"])

        structured = backend_of(model=MODEL, messages=USER, response_format={"type": "json_object"})
        alias = backend_of(model="small-b", messages=USER)
        plain = {backend_of(model=MODEL, messages=USER, user="session-1") for _ in range(3)}
    assert structured == a.name
    assert alias == b.name
    assert plain == {b.name}


@pytest.fixture
def own_pair(tmp_path: Path) -> Iterator[list[EngineRecord]]:
    """Two llama-servers of this test's own, so it may kill them."""
    state = StateDir(tmp_path / "engines")

    async def up() -> list[EngineRecord]:
        async with httpx.AsyncClient() as client:
            return await LocalEngines(state, client=client).up(
                "llamacpp",
                replicas=2,
                options=LaunchOptions(parallel=2, ctx_tokens=2048),
                lifetime=Lifetime.TIED_TO_PARENT,
            )

    async def down() -> None:
        async with httpx.AsyncClient() as client:
            await LocalEngines(state, client=client).down()

    records = asyncio.run(up())
    try:
        yield records
    finally:
        asyncio.run(down())


def _kill(record: EngineRecord) -> None:
    os.kill(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(record.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def test_killed_backends_between_requests_and_mid_stream(
    loop_thread: LoopThread, own_pair: list[EngineRecord]
) -> None:
    a, b = own_pair
    config = f"""
backends:
{backends_yaml([a, b])}
routes: [{{pool: default, policy: round_robin}}]
breaker: {{failure_threshold: 1, open_s: 60}}
health: {{interval_s: 60}}
"""
    with running_gateway(loop_thread, config) as gw:
        client = sdk(gw.url)
        # Between requests: A dies; round robin sends every other request to A first.
        _kill(a)
        answers = [
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
            for _ in range(4)
        ]
        state_a = gw.gateway.state.backends[0].breaker.state
        # Mid-stream: B dies while it streams a long answer.
        stream: Any = client.chat.completions.create(
            model=MODEL,
            messages=USER,
            max_tokens=1000,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        got = 0
        with pytest.raises(openai.APIError) as failure:
            for _chunk in stream:
                got += 1
                if got == 3:
                    _kill(b)
                    killed_at = time.monotonic()
        error_after_s = time.monotonic() - killed_at
        state_b = gw.gateway.state.backends[1].breaker.state
    assert len(answers) == 4 and all(x.choices[0].message for x in answers)
    assert state_a is BreakerState.OPEN
    assert error_after_s < 1.0
    assert "mid-stream" in str(failure.value)
    assert state_b is BreakerState.OPEN


def test_client_disconnect_stops_generation(
    loop_thread: LoopThread, llamacpp_server: EngineRecord
) -> None:
    config = f"backends:\n{backends_yaml([llamacpp_server])}"

    def busy_slots() -> int:
        async def read() -> int:
            async with httpx.AsyncClient() as http:
                slots = await LlamaCppAdapter(llamacpp_server.base_url, client=http).slots()
                return sum(s.is_processing for s in slots)

        return asyncio.run(read())

    with running_gateway(loop_thread, config) as gw:
        client = sdk(gw.url)
        stream: Any = client.chat.completions.create(
            model=MODEL,
            messages=USER,
            max_tokens=1500,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        for i, _ in enumerate(stream):
            if i == 3:
                break
        assert busy_slots() == 1  # generating 1500 tokens: minutes on this model and machine
        stream.close()
        closed_at = time.monotonic()
        while busy_slots() and time.monotonic() - closed_at < 10:
            time.sleep(0.05)
        stopped_after_s = time.monotonic() - closed_at
    assert busy_slots() == 0
    # Generation would go on for minutes; cancellation must end it within seconds (the bound
    # leaves room for a loaded 2-core CI machine polling /slots).
    assert stopped_after_s < 5.0


BAD_SHAPES: list[tuple[dict[str, Any], str]] = [
    ({"tools": [{}]}, "tools[0].function"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": 5}}]}, "tools[0].function.name"),
    ({"tools": [{"function": {"name": "f"}}]}, "tools[0].type"),  # llama-server: 500
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "messages[0].content[0].text",
    ),
]


@pytest.mark.parametrize(("extra", "param"), BAD_SHAPES, ids=[p for _, p in BAD_SHAPES])
def test_shapes_engines_answer_with_500_are_the_gateways_400(
    loop_thread: LoopThread, llamacpp_server: EngineRecord, extra: dict[str, Any], param: str
) -> None:
    """What llama-server answers with a 500 in its own error shape (issue 22's probe:
    ``tools: [{}]`` and friends) is refused by the gateway in OpenAI's shape, and the
    engine keeps serving the next request."""
    config = f"backends:\n{backends_yaml([llamacpp_server])}"
    body = {"model": MODEL, "messages": USER, "max_tokens": 4, **extra}
    with running_gateway(loop_thread, config) as gw:
        bad = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=60)
        good = httpx.post(
            f"{gw.url}/v1/chat/completions",
            json={"model": MODEL, "messages": USER, "max_tokens": 4},
            timeout=60,
        )
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["param"] == param
    assert good.status_code == 200
