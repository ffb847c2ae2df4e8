"""Gray rollout onto a real SGLang-CPU pool (the session's two replicas), from a real
llama-server primary, through the ``openai`` SDK.

The canary's share is checked against a binomial bound and against SGLang's own
``sglang:num_requests_total``; the shadow's copies are counted by the same counter while
the client's answers carry llama-server's own ``timings`` field (SGLang sends none), so
the client got the primary's answer and SGLang still received every copy.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from gateway.harness import LoopThread, running_gateway
from gateway.rollout.test_plan import rollout_view, wait_for, within_binomial
from gateway.sglang_counters import completion_tokens, counter_deltas, read_counters
from kvroute.engines.state import EngineRecord

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp, pytest.mark.sglang]

QUESTION: Any = [{"role": "user", "content": "Name one colour."}]
NUM_SESSIONS = 40
CANARY_WEIGHT = 0.3
NUM_SHADOWED = 6


def _config(primary: EngineRecord, sglang: list[EngineRecord], route_extra: str) -> str:
    backends = (
        f"  - {{name: {primary.name}, url: '{primary.base_url}', engine: llamacpp, pool: main}}\n"
    )
    backends += "".join(
        f"  - {{name: {r.name}, url: '{r.base_url}', engine: sglang, pool: sglang}}\n"
        for r in sglang
    )
    return (
        "listener: {access_log: false}\n"
        f"backends:\n{backends}"
        "health: {interval_s: 60}\n"
        f"routes:\n  - {{name: r, pool: main, {route_extra}}}\n"
    )


def test_canary_onto_sglang_takes_its_share(
    loop_thread: LoopThread, llamacpp_server: EngineRecord, sglang_pool: list[EngineRecord]
) -> None:
    engines = [llamacpp_server, *sglang_pool]
    before = read_counters(engines)
    text = _config(
        llamacpp_server, sglang_pool, f"canary: {{pool: sglang, weight: {CANARY_WEIGHT}}}"
    )
    with running_gateway(loop_thread, text) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        raws = [
            client.chat.completions.with_raw_response.create(
                model=llamacpp_server.model_name,
                messages=QUESTION,
                max_tokens=1,
                extra_headers={"x-session-id": f"canary-session-{i}"},
            )
            for i in range(NUM_SESSIONS)
        ]
        view = rollout_view(gw)
    deltas = counter_deltas(before, read_counters(engines))
    sglang_names = {r.name for r in sglang_pool}
    on_canary = [r for r in raws if r.headers["x-kvroute-backend"] in sglang_names]
    on_primary = [r for r in raws if r.headers["x-kvroute-backend"] == llamacpp_server.name]
    assert len(on_canary) + len(on_primary) == NUM_SESSIONS
    assert all(r.headers["x-kvroute-route"] == "canary=canary" for r in on_canary)
    assert all(r.headers["x-kvroute-route"] == "canary=primary" for r in on_primary)
    assert within_binomial(len(on_canary), NUM_SESSIONS, CANARY_WEIGHT), len(on_canary)
    assert view["canary"]["canary"]["requests"] == len(on_canary)
    assert view["canary"]["canary"]["errors"] == 0
    # SGLang finished exactly the canary's requests; llama-server generated the rest.
    assert deltas["sglang:num_requests_total"] == len(on_canary)
    generated = completion_tokens(on_primary)
    assert deltas["llamacpp:tokens_predicted_total"] == generated


def test_shadow_onto_sglang_reaches_it_but_the_client_gets_the_primary(
    loop_thread: LoopThread, llamacpp_server: EngineRecord, sglang_pool: list[EngineRecord]
) -> None:
    engines = [llamacpp_server, *sglang_pool]
    before = read_counters(engines)
    text = _config(llamacpp_server, sglang_pool, "shadow: {pool: sglang, share: 1.0}")
    with running_gateway(loop_thread, text) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        raws = [
            client.chat.completions.with_raw_response.create(
                model=llamacpp_server.model_name, messages=QUESTION, max_tokens=2, temperature=0
            )
            for _ in range(NUM_SHADOWED)
        ]
        # SGLang-CPU answers in seconds to minutes on a busy machine
        wait_for(
            lambda: rollout_view(gw)["shadow"]["shadow"]["requests"] == NUM_SHADOWED,
            timeout_s=600,
        )
        view = rollout_view(gw)
    deltas = counter_deltas(before, read_counters(engines))
    assert {r.headers["x-kvroute-backend"] for r in raws} == {llamacpp_server.name}
    assert {r.headers["x-kvroute-route"] for r in raws} == {"shadow=sglang"}
    bodies = [r.http_response.json() for r in raws]
    assert all("timings" in body for body in bodies)  # llama-server's field, not SGLang's
    assert all(body["choices"][0]["message"]["content"] for body in bodies)
    assert deltas["sglang:num_requests_total"] == NUM_SHADOWED
    shadow = view["shadow"]["shadow"]
    assert shadow["errors"] == 0
    assert all(
        p["shadow"]["backend"] in {r.name for r in sglang_pool} for p in view["shadow"]["recent"]
    )
    generated = completion_tokens(raws)
    assert deltas["llamacpp:tokens_predicted_total"] == generated
