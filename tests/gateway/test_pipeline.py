"""The completion path's contract: every request that reaches the plan stage ends in
exactly one :class:`Outcome`, handed to the observers once, that says how it ended and
carries what the backend reported. Over real sockets, against fake upstreams."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream, Mode
from gateway.harness import LoopThread, RunningGateway, running_gateway
from kvroute.gateway.outcome import Ending, Outcome

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def config(*urls: str, extra: str = "") -> str:
    backends = "\n".join(
        f"  - {{name: b{i}, url: '{url}', engine: llamacpp}}" for i, url in enumerate(urls)
    )
    return f"""
listener: {{access_log: false}}
backends:
{backends}
health: {{interval_s: 60}}
retry: {{max_attempts: 2, backoff_s: 0.001}}
{extra}"""


def recording(gw: RunningGateway) -> list[Outcome]:
    """The outcomes the gateway's pipeline finishes, in order (the observers still run)."""
    outcomes: list[Outcome] = []
    pipeline = gw.gateway.completions
    finish = pipeline.finish

    def record(outcome: Outcome) -> None:
        outcomes.append(outcome)
        finish(outcome)

    pipeline.finish = record  # type: ignore[method-assign]
    return outcomes


def wait_for(outcomes: list[Outcome], n: int) -> None:
    deadline = time.monotonic() + 5
    while len(outcomes) < n and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("stream", [False, True])
def test_an_answered_request_ends_in_one_outcome_with_the_backends_usage(
    loop_thread: LoopThread, fake: FakeUpstream, stream: bool
) -> None:
    with running_gateway(loop_thread, config(fake.url)) as gw:
        outcomes = recording(gw)
        r = httpx.post(
            f"{gw.url}/v1/chat/completions",
            json={**CHAT, "stream": stream, "user": "u-7"},
            headers={"x-request-id": "req-1"},
        )
        wait_for(outcomes, 1)
        time.sleep(0.05)  # a second finish would land by now
    assert r.status_code == 200
    assert len(outcomes) == 1
    (o,) = outcomes
    assert (o.ending, o.status, o.error_kind) == (Ending.ANSWERED, 200, "")
    assert (o.request_id, o.backend, o.model) == ("req-1", "b0", "m")
    assert o.plan.session_key == "u-7" and o.plan.backends[0].name == "b0"
    assert o.body["messages"] == CHAT["messages"]
    assert o.e2e_s is not None and o.ended_s >= o.received_s
    if stream:
        assert o.ttft_s is not None  # the fake streams no usage: none reported
    else:
        assert (o.prompt_tokens, o.completion_tokens) == (7, 1)


def test_a_request_no_backend_answers_is_refused_once_with_its_error_kind(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.mode = Mode.UNAVAILABLE
    with running_gateway(loop_thread, config(fake.url)) as gw:
        outcomes = recording(gw)
        r = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT)
        wait_for(outcomes, 1)
    assert r.status_code == 502
    assert [(o.ending, o.status, o.error_kind) for o in outcomes] == [
        (Ending.REFUSED, 502, "upstream_status")
    ]
    assert len(fake.received) == 2  # both attempts made before the refusal


def test_a_client_that_leaves_before_the_answer_ends_the_request_as_cancelled(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.mode = Mode.HANG
    with running_gateway(loop_thread, config(fake.url)) as gw:
        outcomes = recording(gw)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=0.3)
        wait_for(outcomes, 1)
    assert [(o.ending, o.status) for o in outcomes] == [(Ending.CANCELLED, 0)]


def test_a_request_refused_before_the_plan_has_no_outcome(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    with running_gateway(loop_thread, config(fake.url)) as gw:
        outcomes = recording(gw)
        bad = httpx.post(f"{gw.url}/v1/chat/completions", content=b"{not json")
        time.sleep(0.05)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert outcomes == [] and fake.received == []


def test_a_rollout_route_records_answered_and_refused_outcomes_on_their_side(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    fake2.mode = Mode.UNAVAILABLE
    text = f"""
listener: {{access_log: false}}
backends:
  - {{name: main, url: '{fake.url}', engine: llamacpp, pool: stable}}
  - {{name: cand, url: '{fake2.url}', engine: llamacpp, pool: next}}
health: {{interval_s: 60}}
retry: {{max_attempts: 1}}
breaker: {{failure_threshold: 100}}
routes:
  - {{name: r, pool: stable, canary: {{pool: next, weight: 0.5, sticky: request}}}}
"""
    with running_gateway(loop_thread, text) as gw:
        outcomes = recording(gw)
        codes = [
            httpx.post(
                f"{gw.url}/v1/chat/completions", json=CHAT, headers={"x-request-id": f"q{i}"}
            ).status_code
            for i in range(12)
        ]
        wait_for(outcomes, 12)
        view = httpx.get(f"{gw.url}/kvroute/rollout").json()
    by_pool = {o.pool: o for o in outcomes}
    assert set(codes) == {200, 502}  # both sides taken over 12 request ids
    assert by_pool["stable"].ending is Ending.ANSWERED
    assert by_pool["next"].ending is Ending.REFUSED
    (route,) = view["routes"]
    canary, primary = route["canary"]["canary"], route["canary"]["primary"]
    assert canary["requests"] == codes.count(502) == canary["errors"]
    assert (primary["requests"], primary["errors"]) == (codes.count(200), 0)
