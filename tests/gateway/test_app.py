"""The gateway's own endpoints and guards: keys, limits, body size, admission,
readiness, admin reload, graceful drain. Against a fake upstream."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, running_gateway
from kvroute.gateway.access.auth import hash_key
from kvroute.gateway.config.gateway import load_config, parse_config

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def keyed_config(url: str, extra: str = "") -> str:
    return f"""
listener: {{access_log: false, max_body_bytes: 2000}}
backends:
  - {{name: b0, url: '{url}', engine: llamacpp, models: [m, other]}}
health: {{interval_s: 60}}
keys:
  - {{name: alice, sha256: {hash_key("sk-alice")}, models: [m]}}
  - {{name: bob, sha256: {hash_key("sk-bob")}, requests_per_minute: 2}}
  - {{name: carol, sha256: {hash_key("sk-carol")}, tokens_per_minute: 5}}
admin: {{key_sha256: {hash_key("sk-admin")}}}
{extra}"""


def post(url: str, key: str | None, body: object = CHAT, **kw: object) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, **kw)  # type: ignore[arg-type]


def test_keys_401_403_and_allowed(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        missing = post(gw.url, None)
        wrong = post(gw.url, "sk-nobody")
        forbidden = post(gw.url, "sk-alice", {**CHAT, "model": "other"})
        ok = post(gw.url, "sk-alice")
        models = httpx.get(f"{gw.url}/v1/models", headers={"authorization": "Bearer sk-alice"})
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    assert wrong.status_code == 401
    assert forbidden.status_code == 403 and forbidden.json()["error"]["param"] == "model"
    assert ok.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == ["m"]


def test_request_rate_limit_429_with_retry_after(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        codes = [post(gw.url, "sk-bob").status_code for _ in range(2)]
        limited = post(gw.url, "sk-bob")
    assert codes == [200, 200]
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"


def test_token_rate_limit_charges_usage(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        first = post(gw.url, "sk-carol")  # the fake reports 8 tokens: bucket of 5 in debt
        second = post(gw.url, "sk-carol")
    assert first.status_code == 200
    assert second.status_code == 429 and "tokens per minute" in second.json()["error"]["message"]


def test_body_too_large_is_413(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        r = post(gw.url, "sk-alice", big)
        metrics = httpx.get(f"{gw.url}/metrics").text
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert fake.received == []
    assert 'kvroute:errors_total{kind="body_too_large"} 1' in metrics


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"", None),
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"model": 3, "messages": [{"role": "user"}]}', "model"),
        (b'{"model": "m", "messages": []}', "messages"),
        (b'{"model": "m", "messages": ["x"]}', "messages[0]"),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', "model"),
        (b'{"model": "", "messages": [{"role": "user", "content": "hi"}]}', "model"),
        # engines answer these with a 500; the gateway says what is wrong instead
        (b'{"model": "m", "messages": [{"role": "user"}, {"content": "hi"}]}', "messages[1].role"),
        (b'{"model": "m", "messages": [{"role": "user"}], "tools": "x"}', "tools"),
        (b'{"model": "m", "messages": [{"role": "user"}], "tools": ["x"]}', "tools[0]"),
        (b'{"model": "m", "messages": [{"role": "user"}], "tools": [{}]}', "tools[0].function"),
        (
            b'{"model": "m", "messages": [{"role": "user"}], "tools": [{"type": "function"}]}',
            "tools[0].function",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user"}], '
            b'"tools": [{"type": "function", "function": {"name": 5}}]}',
            "tools[0].function.name",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user"}], "tools": [{"function": {"name": "f"}}]}',
            "tools[0].type",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user"}], '
            b'"tools": [{"type": "x", "function": {"name": "f"}}]}',
            "tools[0].type",
        ),
        (b'{"model": "m", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [5]}]}',
            "messages[0].content[0]",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
            "messages[0].content[0].text",
        ),
        (b'{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}', "stream"),
        (b'{"model": "m", "messages": [{"role": "user"}], "stream_options": 1}', "stream_options"),
    ],
)
def test_bad_input_is_400_with_param(
    loop_thread: LoopThread, fake: FakeUpstream, body: bytes, param: str | None
) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        r = httpx.post(
            f"{gw.url}/v1/chat/completions",
            content=body,
            headers={"authorization": "Bearer sk-alice"},
        )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param
    assert fake.received == []


def test_unknown_model_and_paths(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        unknown = post(gw.url, "sk-bob", {**CHAT, "model": "nope"})
        path = httpx.get(f"{gw.url}/v2/whatever")
        method = httpx.get(
            f"{gw.url}/v1/chat/completions", headers={"authorization": "Bearer sk-bob"}
        )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert path.status_code == 404
    assert method.status_code == 405 and method.headers["allow"] == "POST"


@pytest.mark.parametrize("path", ["/health", "/ready", "/metrics", "/v1/models"])
def test_probe_endpoints_take_get_and_head_only(
    loop_thread: LoopThread, fake: FakeUpstream, path: str
) -> None:
    key = {"authorization": "Bearer sk-alice"}
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw, httpx.Client() as client:
        wrong = client.delete(f"{gw.url}{path}", headers=key)
        head = client.head(f"{gw.url}{path}", headers=key)
        after = client.get(f"{gw.url}/health")  # the same connection: still in sync
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, HEAD"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert head.status_code == 200 and head.content == b""
    assert after.status_code == 200


def test_health_ready_metrics_are_open(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        assert httpx.get(f"{gw.url}/health").json() == {"status": "ok"}
        ready = httpx.get(f"{gw.url}/ready")
        metrics = httpx.get(f"{gw.url}/metrics")
    assert ready.status_code == 200 and ready.json()["backends_available"] == ["b0"]
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'kvroute:backend_up{backend="b0",pool="default",engine="llamacpp"} 1' in metrics.text


def test_admission_queue_full_is_503_with_retry_after(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.num_tokens, fake.token_interval_s = 40, 0.02
    extra = "limits: {max_in_flight: 1, max_queue: 1, queue_timeout_s: 5}"
    with running_gateway(loop_thread, keyed_config(fake.url, extra)) as gw:
        results: list[int] = []

        def slow() -> None:
            results.append(post(gw.url, "sk-alice", {**CHAT, "stream": True}).status_code)

        threads = [threading.Thread(target=slow) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 2
        while gw.gateway.gate.num_queued < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        rejected = post(gw.url, "sk-alice")
        for t in threads:
            t.join()
    assert rejected.status_code == 503 and rejected.headers["retry-after"] == "1"
    assert sorted(results) == [200, 200]  # the queued one ran once the first finished


def test_admin_reload_keeps_streams_and_needs_the_admin_key(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream, tmp_path: Path
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(keyed_config(fake.url))
    fake.num_tokens, fake.token_interval_s = 20, 0.02
    with running_gateway(loop_thread, load_config(path), config_path=path) as gw:
        out: list[httpx.Response] = []
        t = threading.Thread(
            target=lambda: out.append(post(gw.url, "sk-alice", {**CHAT, "stream": True}))
        )
        t.start()
        time.sleep(0.1)
        path.write_text(keyed_config(fake2.url))
        denied = httpx.post(f"{gw.url}/admin/reload", headers={"authorization": "Bearer sk-alice"})
        reloaded = httpx.post(
            f"{gw.url}/admin/reload", headers={"authorization": "Bearer sk-admin"}
        )
        after = post(gw.url, "sk-alice")
        path.write_text("backends: 3\n")
        broken = httpx.post(f"{gw.url}/admin/reload", headers={"authorization": "Bearer sk-admin"})
        t.join()
    assert denied.status_code == 401
    assert reloaded.status_code == 200
    assert out[0].status_code == 200 and out[0].text.endswith("data: [DONE]\n\n")
    assert len(fake2.received) == 1 and after.status_code == 200
    assert broken.status_code == 400 and "gw.yaml:1" in broken.json()["error"]["message"]


def test_graceful_stop_lets_streams_finish(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    fake.num_tokens, fake.token_interval_s = 10, 0.03
    config = parse_config(keyed_config(fake.url), "t.yaml")
    with running_gateway(loop_thread, config) as gw:
        out: list[str] = []
        t = threading.Thread(
            target=lambda: out.append(post(gw.url, "sk-alice", {**CHAT, "stream": True}).text)
        )
        t.start()
        deadline = time.monotonic() + 10
        while not fake.received and time.monotonic() < deadline:  # the stream has started upstream
            time.sleep(0.01)
        cut = gw.loop.run(gw.gateway.stop(5.0))
        t.join()
    assert cut == 0
    assert out[0].endswith("data: [DONE]\n\n")
    assert [json.loads(e[6:]) for e in out[0].split("\n\n") if e.startswith("data: {")][-1]


def test_requests_total_counts_completions_not_scrapes_or_pages(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    config = f"backends: [{{name: b0, url: '{fake.url}', engine: vllm}}]\n"
    with running_gateway(loop_thread, config) as gw, httpx.Client(base_url=gw.url) as client:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
        for path in ("/v1/models", "/kvroute/status", "/metrics", "/health"):
            client.get(path)
        metrics = client.get("/metrics").text
    counted = [line for line in metrics.splitlines() if line.startswith("kvroute:requests_total{")]
    assert len(counted) == 1 and 'backend="b0"' in counted[0] and counted[0].endswith(" 1")


def test_the_root_says_what_the_gateway_is(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    with running_gateway(loop_thread, keyed_config(fake.url)) as gw:
        page = httpx.get(f"{gw.url}/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "kvroute gateway" in page.text and "/kvroute/status" in page.text
        assert fake.url not in page.text and "sk-" not in page.text  # open: nothing secret
        assert httpx.post(f"{gw.url}/").status_code == 405
