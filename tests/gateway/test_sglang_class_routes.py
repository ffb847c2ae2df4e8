"""One gateway over three real engines: llama-server, vLLM-CPU and SGLang-CPU pools, with
class routes between them, driven by the ``openai`` SDK.

Structured output goes to SGLang (its grammar backend, xgrammar, constrains the answer),
agent and tool traffic to llama.cpp, every other chat to vLLM. Which engine served each
request is read from the engines' own ``/metrics`` counters (before and after, exact
deltas), not only from the gateway's ``x-kvroute-backend`` header: a class that reached
the wrong engine moves the wrong counter.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from gateway.harness import LoopThread, running_gateway
from gateway.sglang_counters import completion_tokens, counter_deltas, read_counters
from kvroute.engines.state import EngineRecord

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp, pytest.mark.vllm, pytest.mark.sglang]

SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["colour"],
}
QUESTION: Any = [{"role": "user", "content": "Name one colour."}]
# Four assistant turns in the history: the agent class (classify.agent_min_steps = 4).
AGENT: Any = [
    message
    for step in range(4)
    for message in (
        {"role": "user", "content": f"Step {step}: what next?"},
        {"role": "assistant", "content": f"Done step {step}."},
    )
] + [{"role": "user", "content": "And now?"}]


def test_each_class_reaches_its_engine(
    loop_thread: LoopThread,
    llamacpp_server: EngineRecord,
    vllm_server: EngineRecord,
    sglang_server: EngineRecord,
) -> None:
    engines = [llamacpp_server, vllm_server, sglang_server]
    model = sglang_server.model_name
    assert {r.model_name for r in engines} == {model}  # engines up serves one name
    backends = "".join(
        f"  - {{name: {r.name}, url: '{r.base_url}', engine: {r.engine}, model: {model}, "
        f"pool: {r.engine}}}\n"
        for r in engines
    )
    config = (
        f"backends:\n{backends}"
        "routes:\n"
        "  - {name: structured, match: {class: structured}, pool: sglang}\n"
        "  - {name: agents, match: {class: [agent, tools]}, pool: llamacpp}\n"
        "  - {name: rest, pool: vllm}\n"
    )
    before = read_counters(engines)
    with running_gateway(loop_thread, config) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)

        def ask(**kw: Any) -> Any:
            return client.chat.completions.with_raw_response.create(
                model=model, temperature=0, **kw
            )

        structured = [
            ask(
                messages=QUESTION,
                max_tokens=64,  # xgrammar lets the model put newlines in the JSON
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "c", "schema": SCHEMA},
                },
            )
            for _ in range(2)
        ]
        agent = [ask(messages=AGENT, max_tokens=3) for _ in range(2)]
        plain = [ask(messages=QUESTION, max_tokens=3) for _ in range(3)]
    after = read_counters(engines)
    deltas = counter_deltas(before, after)

    def seen(raws: list[Any], header: str) -> set[str]:
        return {str(r.headers[header]) for r in raws}

    assert seen(structured, "x-kvroute-class") == {"structured"}
    assert seen(structured, "x-kvroute-backend") == {sglang_server.name}
    assert seen(agent, "x-kvroute-class") == {"agent"}
    assert seen(agent, "x-kvroute-backend") == {llamacpp_server.name}
    assert seen(plain, "x-kvroute-class") == {"chat"}
    assert seen(plain, "x-kvroute-backend") == {vllm_server.name}
    for raw in structured:  # SGLang's grammar held: the answer is the schema's
        answer = json.loads(raw.parse().choices[0].message.content or "{}")
        assert answer["colour"] in ("red", "green", "blue")
    # The engines' own counts: each saw exactly its class's requests and nothing else.
    assert deltas["sglang:num_requests_total"] == 2
    assert deltas["sglang:num_so_requests_total"] == 2
    assert deltas["vllm:request_success_total"] == 3
    generated = completion_tokens(agent)
    assert generated > 0
    assert deltas["llamacpp:tokens_predicted_total"] == generated
