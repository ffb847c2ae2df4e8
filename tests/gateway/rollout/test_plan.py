"""Gray rollout: canary split and stickiness, shadow copies that never reach the
client, the comparison view, config errors. Fake upstreams stand in for the pools
where the test needs to tell answers apart or make a shadow hang or fail; the last
test mirrors between two real llama-servers."""

from __future__ import annotations

import json
import math
import socket
import statistics
import time
from typing import Any

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream, Mode
from gateway.harness import LoopThread, RunningGateway, running_gateway
from kvroute.engines.state import EngineRecord
from kvroute.errors import InputError
from kvroute.gateway.backends.breaker import BreakerState
from kvroute.gateway.config.gateway import parse_config
from kvroute.gateway.rollout.plan import Side, plan_rollout, unit_hash

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def config(primary: str, other: str, route_extra: str, *, other_engine: str = "vllm") -> str:
    return (
        "listener: {access_log: false}\n"
        "backends:\n"
        f"  - {{name: main-1, url: '{primary}', engine: vllm, models: [m], pool: main}}\n"
        f"  - {{name: cand-1, url: '{other}', engine: {other_engine}, models: [m], pool: cand}}\n"
        "health: {interval_s: 60}\n"
        "retry: {backoff_s: 0.001}\n"
        "routes:\n"
        f"  - {{name: r, pool: main, {route_extra}}}\n"
    )


def within_binomial(count: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def rollout_view(gw: RunningGateway) -> dict[str, Any]:
    view = httpx.get(f"{gw.url}/kvroute/rollout").json()
    (route,) = view["routes"]
    assert isinstance(route, dict)
    return route


def wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def events(text: str) -> list[str]:
    return [e.removeprefix("data: ") for e in text.split("\n\n") if e]


# -- the split itself (pure) ----------------------------------------------------------


def test_canary_split_is_sticky_monotone_and_independent_of_shadow() -> None:
    def route(weight: float) -> Any:
        text = config(
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            f"canary: {{pool: cand, weight: {weight}}}, shadow: {{pool: cand, share: 0.5, sample: session}}",
        )
        return parse_config(text, "t.yaml").routes[0]

    at_10, at_20 = route(0.1), route(0.2)
    sessions = [f"s{i}" for i in range(1000)]
    plans_10 = [plan_rollout(at_10, s, "", f"req-{s}") for s in sessions]
    plans_20 = [plan_rollout(at_20, s, "", f"req-{s}") for s in sessions]
    canary_10 = {s for s, p in zip(sessions, plans_10, strict=True) if p and p.side is Side.CANARY}
    canary_20 = {s for s, p in zip(sessions, plans_20, strict=True) if p and p.side is Side.CANARY}
    assert within_binomial(len(canary_10), 1000, 0.1)
    assert within_binomial(len(canary_20), 1000, 0.2)
    assert canary_10 <= canary_20  # raising the weight moves sessions one way only
    # the same session decides the same, whatever its request id
    again = [plan_rollout(at_10, s, "", "another-id") for s in sessions]
    assert {s for s, p in zip(sessions, again, strict=True) if p and p.side is Side.CANARY} == (
        canary_10
    )
    # shadow sampling does not follow the canary split
    shadowed = {s for s, p in zip(sessions, plans_10, strict=True) if p and p.shadow}
    assert within_binomial(len(shadowed), 1000, 0.5)
    assert within_binomial(len(shadowed & canary_10), len(canary_10), 0.5)
    # no session: the API key's name is sticky; no key either: each request decides
    by_key = {plan_rollout(at_10, None, "alice", f"r{i}").side for i in range(200)}  # type: ignore[union-attr]
    assert len(by_key) == 1
    per_request = [unit_hash("canary:r", f"request:r{i}") < 0.1 for i in range(1000)]
    assert within_binomial(sum(per_request), 1000, 0.1)


def test_canary_and_shadow_limited_to_some_keys() -> None:
    text = config(
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
        "canary: {pool: cand, weight: 1.0, keys: [alice]}, "
        "shadow: {pool: cand, share: 1.0, keys: alice}",
    )
    route = parse_config(text, "t.yaml").routes[0]
    alice = [plan_rollout(route, f"s{i}", "alice", f"r{i}") for i in range(50)]
    bob = [plan_rollout(route, f"s{i}", "bob", f"r{i}") for i in range(50)]
    assert all(p is not None and p.side is Side.CANARY and p.shadow for p in alice)
    assert all(p is not None and p.side is Side.PRIMARY and not p.shadow for p in bob)


# -- canary through the gateway -------------------------------------------------------


def test_canary_ten_percent_over_1000_sessions_sticks_per_session(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    text = config(fake.url, fake2.url, "canary: {pool: cand, weight: 0.1}")
    side_of: dict[str, str] = {}
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url) as client:
        for i in range(1000):
            r = client.post("/v1/chat/completions", json=CHAT, headers={"x-session-id": f"s{i}"})
            assert r.status_code == 200
            side_of[f"s{i}"] = r.headers["x-kvroute-backend"]
            assert r.headers["x-kvroute-route"] in ("canary=primary", "canary=canary")
        # a second turn for 300 sessions, via the body's `user` this time
        for i in range(0, 1000, 3):
            r = client.post("/v1/chat/completions", json={**CHAT, "user": f"s{i}"})
            assert r.headers["x-kvroute-backend"] == side_of[f"s{i}"], f"s{i} switched sides"
        view = rollout_view(gw)
        metrics = client.get("/metrics").text
    num_canary = sum(b == "cand-1" for b in side_of.values())
    assert within_binomial(num_canary, 1000, 0.1), num_canary
    total = 1000 + len(range(0, 1000, 3))
    assert len(fake2.received) == view["canary"]["canary"]["requests"]
    assert len(fake.received) + len(fake2.received) == total
    assert view["canary"]["primary"]["pools"] == {"main": len(fake.received)}
    assert view["canary"]["canary"]["error_rate"] == 0.0
    line = f'kvroute:canary_requests_total{{route="r",side="canary",pool="cand",code="200"}} {len(fake2.received)}'
    assert line in metrics


def test_canary_pool_down_sends_its_share_to_the_primary(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    text = config(fake.url, dead, "canary: {pool: cand, weight: 1.0}")
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url) as client:
        first = client.post("/v1/chat/completions", json=CHAT)
        later = [client.post("/v1/chat/completions", json=CHAT) for _ in range(5)]
        view = rollout_view(gw)
    assert first.status_code == 502  # the canary's own failure, counted against it
    assert all(r.status_code == 200 for r in later)
    assert {r.headers["x-kvroute-backend"] for r in later} == {"main-1"}
    assert "canary_unavailable" in later[0].headers["x-kvroute-route"]
    assert view["canary"]["canary"]["errors"] == 1
    assert view["canary"]["primary"]["requests"] == 5


def test_a_client_that_leaves_is_not_the_canarys_error(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    fake2.num_tokens, fake2.token_interval_s = 20, 0.1
    text = config(fake.url, fake2.url, "canary: {pool: cand, weight: 1.0}")
    with running_gateway(loop_thread, text) as gw:
        with httpx.stream(
            "POST", f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True}
        ) as r:
            assert r.headers["x-kvroute-backend"] == "cand-1"
            next(r.iter_raw())  # one event, then hang up
        wait_for(lambda: fake2.num_disconnects == 1)
        wait_for(lambda: rollout_view(gw)["canary"]["canary"]["requests"] == 1)
        side = rollout_view(gw)["canary"]["canary"]
    assert side["errors"] == 0 and side["e2e_p50_ms"] is None


# -- shadow ---------------------------------------------------------------------------


def test_shadow_copies_reach_the_shadow_but_the_client_gets_only_the_primary(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    fake.num_tokens, fake2.num_tokens = 3, 7  # the two answers differ
    text = config(fake.url, fake2.url, "shadow: {pool: cand, share: 1.0}")
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url) as client:
        streamed = [
            client.post("/v1/chat/completions", json={**CHAT, "stream": True}) for _ in range(10)
        ]
        full = client.post("/v1/chat/completions", json=CHAT)
        wait_for(lambda: rollout_view(gw)["shadow"]["shadow"]["requests"] == 11)
        view = rollout_view(gw)
        metrics = client.get("/metrics").text
    for r in streamed:
        got = events(r.text)
        assert [json.loads(e)["choices"][0]["delta"]["content"] for e in got[:-1]] == [
            "t0",
            "t1",
            "t2",
        ]
        assert r.headers["x-kvroute-backend"] == "main-1"
        assert r.headers["x-kvroute-route"] == "shadow=cand"
    assert full.json()["choices"][0]["message"]["content"] == "hi"
    assert len(fake2.received) == 11
    assert all(copy.headers["x-kvroute-shadow"] == "1" for copy in fake2.received)
    # the copy is the request the primary got, byte for byte
    assert [c.body for c in fake2.received] == [p.body for p in fake.received]
    shadow, primary = view["shadow"]["shadow"], view["shadow"]["primary"]
    assert shadow["errors"] == 0 and primary["requests"] == 11
    assert shadow["ttft_p50_ms"] is not None and shadow["e2e_p99_ms"] is not None
    assert len(view["shadow"]["recent"]) == 11
    assert all(p["shadow"]["backend"] == "cand-1" for p in view["shadow"]["recent"])
    assert 'kvroute:shadow_requests_total{route="r",side="shadow",pool="cand",outcome="ok"} 11' in (
        metrics
    )


def test_hung_shadow_changes_neither_answer_nor_latency(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    fake2.mode = Mode.HANG
    text = config(fake.url, fake2.url, "shadow: {pool: cand, share: 1.0, max_in_flight: 2}")
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url) as client:
        mirrored: list[float] = []
        for _ in range(20):
            started = time.perf_counter()
            r = client.post("/v1/chat/completions", json=CHAT)
            mirrored.append(time.perf_counter() - started)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "hi"
        view = rollout_view(gw)
        in_flight = httpx.get(f"{gw.url}/kvroute/rollout").json()["shadow_in_flight"]
        stop_started = time.perf_counter()
    stop_s = time.perf_counter() - stop_started
    assert view["shadow"]["dropped"] == {"dropped_busy": 18}  # bounded: 2 hang, the rest drop
    assert in_flight == 2
    assert view["shadow"]["primary"]["requests"] == 2
    assert view["shadow"]["primary"]["errors"] == 0
    # the client waited for its primary only (the hung copies hold 3600 s)
    assert statistics.median(mirrored) < 0.5
    assert stop_s < 5  # shutdown cancels the hung copies
    assert len(fake2.received) == 2


def test_failing_shadow_is_recorded_and_leaves_the_client_alone(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    fake2.mode = Mode.UNAVAILABLE
    text = config(fake.url, fake2.url, "shadow: {pool: cand, share: 1.0}")
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url) as client:
        answers = [client.post("/v1/chat/completions", json=CHAT) for _ in range(6)]
        wait_for(lambda: rollout_view(gw)["shadow"]["shadow"]["requests"] == 6)
        view = rollout_view(gw)
        breakers = {b.name: b.breaker.state for b in gw.gateway.state.backends}
    assert all(a.status_code == 200 and a.headers["x-kvroute-backend"] == "main-1" for a in answers)
    assert view["shadow"]["shadow"]["errors"] == 6
    assert view["shadow"]["shadow"]["error_rate"] == 1.0
    assert view["shadow"]["primary"]["error_rate"] == 0.0
    assert breakers == {"main-1": BreakerState.CLOSED, "cand-1": BreakerState.CLOSED}


def test_shadow_latency_does_not_add_to_the_clients(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    """Side by side in one gateway: a route mirrored to a slow shadow and one that is
    not; the client's medians stay within noise of each other."""
    fake2.token_interval_s = 0.1  # the shadow is slow: 5 tokens, 500 ms
    text = config(
        fake.url,
        fake2.url,
        "match: {model: m}, shadow: {pool: cand, share: 1.0, max_in_flight: 64}",
    )
    text += "  - {name: plain, pool: main}\n"
    body_mirrored = {**CHAT, "stream": True}
    body_plain = {**CHAT, "model": "m2", "stream": True}
    text = text.replace("models: [m], pool: main", "models: [m, m2], pool: main")
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url) as client:
        times: dict[str, list[float]] = {"mirrored": [], "plain": []}
        for _ in range(30):
            for name, body in (("mirrored", body_mirrored), ("plain", body_plain)):
                started = time.perf_counter()
                r = client.post("/v1/chat/completions", json=body)
                times[name].append(time.perf_counter() - started)
                assert r.status_code == 200
        wait_for(lambda: rollout_view(gw)["shadow"]["shadow"]["requests"] == 30)
    mirrored, plain = statistics.median(times["mirrored"]), statistics.median(times["plain"])
    assert mirrored < 0.25  # far below the shadow's 500 ms
    assert mirrored < plain * 3 + 0.005, (mirrored, plain)


# -- config ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("canary: {pool: nope, weight: 0.1}", "routes[0].canary.pool", "no backend is in pool"),
        ("canary: {pool: main, weight: 0.1}", "routes[0].canary.pool", "the route's own pool"),
        ("canary: {pool: cand, weight: 1.5}", "routes[0].canary.weight", "(0, 1]"),
        ("canary: {pool: cand, weight: 0}", "routes[0].canary.weight", "(0, 1]"),
        ("canary: {pool: cand}", "routes[0].canary", "'weight' is required"),
        (
            "canary: {pool: cand, weight: 0.1, sticky: user}",
            "routes[0].canary.sticky",
            "valid: session, request",
        ),
        ("canary: {pool: cand, weight: 0.1, ratio: 2}", "routes[0].canary.ratio", "unknown key"),
        ("shadow: {pool: cand}", "routes[0].shadow", "'share' is required"),
        ("shadow: {pool: cand, share: -0.2}", "routes[0].shadow.share", "(0, 1]"),
        (
            "shadow: {pool: cand, share: 0.2, max_in_flight: 0}",
            "routes[0].shadow.max_in_flight",
            "≥ 1",
        ),
        ("shadow: {pool: cand, share: yes}", "routes[0].shadow.share", "must be a number"),
    ],
)
def test_config_errors_name_file_line_and_field(extra: str, field: str, message: str) -> None:
    text = config("http://127.0.0.1:1", "http://127.0.0.1:2", extra)
    with pytest.raises(InputError) as info:
        parse_config(text, "gw.yaml")
    error = str(info.value)
    assert "gw.yaml:8" in error and f"field '{field}'" in error and message in error, error


# -- real engines ---------------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.llamacpp
def test_shadow_between_real_llama_servers_records_cache_hits(
    loop_thread: LoopThread, llamacpp_pool: list[EngineRecord]
) -> None:
    primary, shadow = llamacpp_pool
    text = (
        "listener: {access_log: false}\n"
        "backends:\n"
        f"  - {{name: {primary.name}, url: '{primary.base_url}', engine: llamacpp, pool: main}}\n"
        f"  - {{name: {shadow.name}, url: '{shadow.base_url}', engine: llamacpp, pool: cand}}\n"
        "routes:\n"
        "  - {name: r, pool: main, shadow: {pool: cand, share: 1.0}}\n"
    )
    system = "You are a terse assistant. " * 40  # a prefix long enough to be worth caching
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Name one colour."},
    ]
    body = {"model": primary.model_name, "messages": messages, "max_tokens": 8, "temperature": 0}
    with running_gateway(loop_thread, text) as gw, httpx.Client(base_url=gw.url, timeout=60) as c:
        direct = httpx.post(f"{primary.base_url}/v1/chat/completions", json=body, timeout=60)
        answers = [c.post("/v1/chat/completions", json=body)]
        # one copy at a time, so the second finds the first's prompt in a slot
        wait_for(lambda: rollout_view(gw)["shadow"]["shadow"]["requests"] == 1, 120)
        answers.append(c.post("/v1/chat/completions", json={**body, "stream": True}))
        wait_for(lambda: rollout_view(gw)["shadow"]["shadow"]["requests"] == 2, 120)
        view = rollout_view(gw)
    assert all(a.status_code == 200 for a in answers)
    assert {a.headers["x-kvroute-backend"] for a in answers} == {primary.name}
    assert answers[0].json()["choices"] == direct.json()["choices"]  # the primary's answer
    side = view["shadow"]["shadow"]
    assert side["errors"] == 0 and side["pools"] == {"cand": 2}
    recent = view["shadow"]["recent"]
    assert recent[1]["shadow"]["ttft_ms"] is not None
    # the second copy shares the first's prompt: the shadow engine reports a cache hit
    assert recent[1]["shadow"]["cached_tokens"] and recent[1]["shadow"]["cached_tokens"] > 100, (
        json.dumps(view)
    )
    assert side["cache_hit"] is not None and side["cache_hit"] > 0.3
