"""Forwarding through a real gateway to fake upstreams: pass-through, usage
injection and stripping, retries and failover, mid-stream failures, timeouts,
client disconnects. Real sockets; only the upstream is fake, for its faults."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream, Mode
from gateway.harness import LoopThread, running_gateway
from kvroute.gateway.backends.breaker import BreakerState
from kvroute.gateway.proxy import forward as proxy


def config(*urls: str, extra: str = "", timeouts: str = "") -> str:
    backends = "".join(
        f"  - {{name: b{i}, url: '{u}', engine: vllm, models: [m]{timeouts}}}\n"
        for i, u in enumerate(urls)
    )
    return (
        "listener: {access_log: false}\n"
        f"backends:\n{backends}"
        "health: {interval_s: 60}\n"
        "retry: {backoff_s: 0.001}\n" + extra
    )


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def events(text: str) -> list[str]:
    return [e.removeprefix("data: ") for e in text.split("\n\n") if e]


def test_stream_passes_through_and_hides_the_usage_it_added(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    with running_gateway(loop_thread, config(fake.url)) as gw:
        body = {**CHAT, "stream": True, "my_engine_field": {"x": [1, 2]}, "max_tokens": 3}
        r = httpx.post(f"{gw.url}/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    got = events(r.text)
    assert got[-1] == "[DONE]"
    assert [json.loads(e)["choices"][0]["delta"]["content"] for e in got[:-1]] == [
        f"t{i}" for i in range(5)
    ]
    sent = fake.received[0].json
    # unknown fields and max_tokens forwarded as they were; usage asked for upstream
    assert sent["my_engine_field"] == {"x": [1, 2]} and sent["max_tokens"] == 3
    assert sent["stream_options"] == {"include_usage": True}
    assert "max_completion_tokens" not in sent


def test_stream_keeps_usage_the_client_asked_for(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    with running_gateway(loop_thread, config(fake.url)) as gw:
        body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        raw = json.dumps(body, indent=1).encode()  # odd formatting survives
        r = httpx.post(f"{gw.url}/v1/chat/completions", content=raw)
        metrics = httpx.get(f"{gw.url}/metrics").text
    usage = [json.loads(e) for e in events(r.text)[:-1] if "usage" in e]
    assert usage[0]["usage"]["completion_tokens"] == 5
    assert fake.received[0].body == raw  # byte for byte
    assert (
        'kvroute:generation_tokens_total{backend="b0",pool="default",class="chat",policy="least_outstanding"} 5'
        in metrics
    )


def test_non_stream_passes_status_and_body(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, config(fake.url)) as gw:
        ok = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT)
        fake.mode = Mode.BAD_REQUEST
        bad = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "hi"
    assert ok.headers["x-kvroute-backend"] == "b0" and ok.headers["x-kvroute-class"] == "chat"
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "bad_request"
    assert len(fake.received) == 2  # a 400 is not retried


def test_refused_backend_fails_over_and_opens_its_breaker(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    with running_gateway(
        loop_thread,
        config(dead, fake.url, extra="routes: [{pool: default, policy: round_robin}]\n"),
    ) as gw:
        statuses = [
            httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT).status_code for _ in range(4)
        ]
        dead_backend = gw.gateway.state.backends[0]
        assert dead_backend.breaker.state is BreakerState.OPEN
    assert statuses == [200] * 4
    assert len(fake.received) == 4


def test_503_is_retried_on_the_next_backend(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    fake.mode = Mode.UNAVAILABLE
    with running_gateway(
        loop_thread,
        config(fake.url, fake2.url, extra="routes: [{pool: default, policy: round_robin}]\n"),
    ) as gw:
        r = [
            httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True})
            for _ in range(2)
        ]
    assert [x.status_code for x in r] == [200, 200]
    assert len(fake2.received) == 2


def test_all_attempts_failing_is_a_502_in_openai_shape(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.mode = Mode.UNAVAILABLE
    with running_gateway(
        loop_thread, config(fake.url, extra="breaker: {failure_threshold: 10}\n")
    ) as gw:
        r = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT)
    assert r.status_code == 502
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert len(fake.received) == 3  # max_attempts


def test_reset_mid_stream_ends_with_an_error_event_and_opens_the_breaker(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.mode = Mode.RESET_MID_STREAM
    with running_gateway(
        loop_thread, config(fake.url, extra="breaker: {failure_threshold: 1}\n")
    ) as gw:
        t0 = time.monotonic()
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True})
        elapsed = time.monotonic() - t0
        breaker = gw.gateway.state.backends[0].breaker.state
        metrics = httpx.get(f"{gw.url}/metrics").text
    got = events(r.text)
    assert elapsed < 1.0
    assert json.loads(got[0])["choices"][0]["delta"]["content"] == "t0"
    assert json.loads(got[-2])["error"]["code"] == "upstream_reset"
    assert got[-1] == "[DONE]"
    assert breaker is BreakerState.OPEN
    assert 'kvroute:upstream_failures_total{backend="b0",kind="reset"} 1' in metrics


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "non-streamed"])
def test_hung_backend_times_out_at_first_token_and_fails_over(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream, stream: bool
) -> None:
    """Non-streamed too: its head is its first token (before, it waited total_s)."""
    fake.mode = Mode.HANG
    timeouts = ", timeouts: {first_token_s: 0.3}"
    extra = "routes: [{pool: default, policy: round_robin}]\n"
    with running_gateway(
        loop_thread, config(fake.url, fake2.url, extra=extra, timeouts=timeouts)
    ) as gw:
        t0 = time.monotonic()
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": stream})
        elapsed = time.monotonic() - t0
    assert r.status_code == 200 and r.headers["x-kvroute-backend"] == "b1"
    assert events(r.text)[-1] == "[DONE]" if stream else r.json()["choices"]
    assert 0.25 < elapsed < 2.0
    assert len(fake2.received) == 1


def test_stall_after_first_token_hits_the_total_timeout(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.mode = Mode.HANG_AFTER_FIRST
    with running_gateway(
        loop_thread, config(fake.url, timeouts=", timeouts: {total_s: 0.5}")
    ) as gw:
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True})
    got = events(r.text)
    assert json.loads(got[-2])["error"]["code"] == "upstream_total_timeout"


def test_a_stalled_stream_is_cut_at_the_idle_timeout(
    loop_thread: LoopThread, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """Tokens flowing slower than idle_s apart keep a stream alive; silence past it ends
    it with a terminal event and a log line (before: held for total_s, 600 s)."""
    fake.num_tokens, fake.token_interval_s = 4, 0.1
    timeouts = ", timeouts: {idle_s: 0.3}"
    with running_gateway(loop_thread, config(fake.url, timeouts=timeouts)) as gw:
        slow = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True})
        fake.mode = Mode.HANG_AFTER_FIRST
        t0 = time.monotonic()
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True})
        elapsed = time.monotonic() - t0
    assert events(slow.text)[-1] == "[DONE]" and "error" not in slow.text
    got = events(r.text)
    assert json.loads(got[-2])["error"]["code"] == "upstream_idle_timeout"
    assert 0.25 < elapsed < 2.0
    assert any("cut: idle_timeout" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("stream", [True, False], ids=["mid-stream", "before the answer"])
def test_a_client_that_leaves_cancels_the_upstream_request(
    loop_thread: LoopThread, fake: FakeUpstream, stream: bool
) -> None:
    """Mid-stream, or while a non-streamed answer (no head until generation ends) is
    still being generated: the upstream request is closed (vLLM aborts it then;
    llama-server 0.3.36 goes on generating a non-streamed answer whatever its socket
    does, so the fake upstream is the witness here). A request that never got an answer
    is logged and counted as 499."""
    if stream:
        fake.num_tokens, fake.token_interval_s = 1000, 0.01
    else:
        fake.mode = Mode.HANG
    with running_gateway(loop_thread, config(fake.url)) as gw:
        url = f"{gw.url}/v1/chat/completions"
        if stream:
            with httpx.stream("POST", url, json={**CHAT, "stream": True}) as r:
                for _ in r.iter_raw():
                    break
        else:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(url, json=CHAT, timeout=0.5)
        deadline = time.monotonic() + 2
        while fake.num_disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake.num_disconnects == 1
        while gw.gateway.state.backends[0].num_outstanding and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gw.gateway.state.backends[0].num_outstanding == 0
        assert gw.gateway.gate.num_in_flight == 0
        metrics = httpx.get(f"{gw.url}/metrics").text
    assert 'kvroute:errors_total{kind="client_disconnect"} 1' in metrics
    assert ('code="499"} 1' in metrics) is not stream


def test_alias_route_rewrites_only_the_model(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    extra = "routes: [{match: {model: alias}, pool: default, upstream_model: m}]\n"
    with running_gateway(loop_thread, config(fake.url, extra=extra)) as gw:
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "model": "alias", "seed": 3})
    assert r.status_code == 200
    assert fake.received[0].json == {**CHAT, "model": "m", "seed": 3}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_an_oversized_upstream_answer_is_a_502(
    loop_thread: LoopThread, fake: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The non-streamed body is read up to a bound (the fake's answer, ~300 bytes,
    stands in for a backend gone wrong that sends without end)."""
    monkeypatch.setattr(proxy, "MAX_UPSTREAM_BODY_BYTES", 100)
    with running_gateway(loop_thread, config(fake.url)) as gw:
        r = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT)
    assert r.status_code == 502 and "larger than 100 bytes" in r.json()["error"]["message"]
