"""tokens_per_minute under concurrency: requests sent at once see each other's
reservations, so a key overshoots by at most one request (before: 30 of 30
concurrent streams admitted on a 50 tokens/min key, 15.6x its budget)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, running_gateway
from gateway.test_app import CHAT, keyed_config, post


def test_concurrent_streams_cannot_overshoot_a_token_budget(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    fake.num_tokens, fake.token_interval_s = 20, 0.02  # each stream takes ~0.4 s
    extra = "limits: {max_in_flight: 64}\n"
    body = {**CHAT, "stream": True, "max_tokens": 20}
    with (
        running_gateway(loop_thread, keyed_config(fake.url, extra)) as gw,
        ThreadPoolExecutor(30) as pool,
    ):
        answers = list(pool.map(lambda _: post(gw.url, "sk-carol", body, timeout=10), range(30)))
    codes = [r.status_code for r in answers]
    # carol has 5 tokens/min: the first request reserves its estimate and puts the
    # bucket in debt, every other one sent meanwhile is refused.
    assert codes.count(200) == 1 and codes.count(429) == 29
    assert len(fake.received) == 1


def test_a_refused_or_failed_request_gives_its_reservation_back(
    loop_thread: LoopThread, fake: FakeUpstream
) -> None:
    extra = "limits: {reserve_tokens: 1}\n"
    with running_gateway(loop_thread, keyed_config(fake.url, extra)) as gw:
        bad = post(gw.url, "sk-carol", {**CHAT, "messages": []})  # 400 before any engine
        limiter = gw.gateway.state.limiters["carol"]
        assert limiter.tokens is not None
        level = limiter.tokens.level
        ok = httpx.post(
            f"{gw.url}/v1/chat/completions",
            json=CHAT,
            headers={"authorization": "Bearer sk-carol"},
        )
    assert bad.status_code == 400 and level > 4.9  # nothing kept for the refused one
    assert ok.status_code == 200
