"""The circuit breaker's half-open probe, ended every way a request can end: each must
release the probe, so a single-backend pool serves again afterwards. Before, a probe
answered with a 500, or whose client left, kept the backend out until a restart
(``503 no_healthy_backend`` for every request). Real sockets; the upstream is fake
because the faults (a 500 on demand, a reset mid-stream, a hang) are its job."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream, Mode
from gateway.harness import LoopThread, RunningGateway, running_gateway
from gateway.proxy.test_forward import CHAT, config

OPEN_S = 0.2
URL = "/v1/chat/completions"


def _success(gw: RunningGateway, fake: FakeUpstream) -> None:
    fake.mode = Mode.STREAM
    assert httpx.post(gw.url + URL, json=CHAT).status_code == 200


def _retryable(gw: RunningGateway, fake: FakeUpstream) -> None:
    fake.mode = Mode.UNAVAILABLE
    assert httpx.post(gw.url + URL, json=CHAT).status_code == 502


def _mid_stream(gw: RunningGateway, fake: FakeUpstream) -> None:
    fake.mode = Mode.RESET_MID_STREAM
    r = httpx.post(gw.url + URL, json={**CHAT, "stream": True})
    assert "upstream_reset" in r.text


def _server_error(gw: RunningGateway, fake: FakeUpstream) -> None:
    fake.mode = Mode.SERVER_ERROR
    assert httpx.post(gw.url + URL, json=CHAT).status_code == 500


def _left_before_answer(gw: RunningGateway, fake: FakeUpstream) -> None:
    fake.mode = Mode.HANG
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gw.url + URL, json=CHAT, timeout=0.3)


def _left_stream(gw: RunningGateway, fake: FakeUpstream) -> None:
    fake.mode, fake.num_tokens, fake.token_interval_s = Mode.STREAM, 1000, 0.01
    with httpx.stream("POST", gw.url + URL, json={**CHAT, "stream": True}) as r:
        for _ in r.iter_raw():
            break


WAYS: dict[str, Callable[[RunningGateway, FakeUpstream], None]] = {
    "success": _success,
    "retryable failure": _retryable,
    "mid-stream failure": _mid_stream,
    "non-retryable 500": _server_error,
    "client left before the answer": _left_before_answer,
    "client left a streamed probe": _left_stream,
}


@pytest.mark.parametrize("way", list(WAYS))
def test_every_way_a_probe_ends_releases_it(
    loop_thread: LoopThread, fake: FakeUpstream, way: str
) -> None:
    extra = f"breaker: {{failure_threshold: 1, open_s: {OPEN_S}}}\n"
    with running_gateway(loop_thread, config(fake.url, extra=extra)) as gw:
        backend = gw.gateway.state.backends[0]
        fake.mode = Mode.UNAVAILABLE
        assert httpx.post(gw.url + URL, json=CHAT).status_code == 502  # opens it
        time.sleep(OPEN_S * 1.25)
        WAYS[way](gw, fake)  # the probe
        deadline = time.monotonic() + 3
        while backend.num_outstanding and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not backend.breaker.probe_in_flight
        time.sleep(OPEN_S * 1.25)  # a failed probe opened it again for open_s
        fake.mode, fake.num_tokens, fake.token_interval_s = Mode.STREAM, 5, 0.0
        after = httpx.post(gw.url + URL, json=CHAT)
    assert after.status_code == 200, after.text
