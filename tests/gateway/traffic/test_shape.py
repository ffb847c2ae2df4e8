"""Live traffic shape: the window math, the band crossings (one warning each, the band
gauge), the predicted-vs-reported counters, the status page served by the gateway, and
the drift numbers on real llama-server replicas."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, running_gateway
from kvroute.analyze.result import VerdictLevel
from kvroute.engines.state import EngineRecord
from kvroute.errors import InputError
from kvroute.gateway.config.gateway import parse_config
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.gateway.traffic.shape import TrafficShape, band_of
from kvroute.gateway.traffic.status import TrafficMetrics, status, status_html

B = 16


def prompt(*blocks: int) -> list[int]:
    """Chained 'hashes' of a prompt whose blocks have these contents."""
    out, h = [], 0
    for b in blocks:
        h = hash((h, b))
        out.append(h)
    return out


def feed(t: TrafficShape, now_s: float, hashes: list[int], **kw: Any) -> int:
    obs = t.observe(
        now_s, workload=kw.pop("workload", "chat"), backend=kw.pop("backend", "b1"),
        block_hashes=hashes, num_tokens=kw.pop("num_tokens", len(hashes) * B), **kw,
    )  # fmt: skip
    return obs.matched_tokens


def test_overlap_counts_prefixes_seen_in_the_window() -> None:
    t = TrafficShape(TrafficConfig(window_requests=3, window_s=100, block_size_tokens=B))
    assert feed(t, 0, prompt(1, 2, 3)) == 0
    assert feed(t, 1, prompt(1, 2, 9)) == 2 * B  # shares two leading blocks
    assert feed(t, 2, prompt(5, 2, 3)) == 0  # same later blocks, different first: no match
    assert feed(t, 3, prompt(1, 2, 3), num_tokens=40) == 40  # capped at the prompt length
    assert t.num_requests == 3 and t.overlap == pytest.approx(
        (2 * B + 0 + 40) / (3 * B + 3 * B + 40)
    )
    # The window holds the last three requests.
    feed(t, 4, prompt(7))
    feed(t, 5, prompt(8))
    assert feed(t, 6, prompt(1, 2, 9)) == 2 * B  # t=3's 1-2-3 is still in the window
    assert feed(t, 7, prompt(1, 2, 3)) == 2 * B  # t=3 left: only t=6's 1-2 matches
    t2 = TrafficShape(TrafficConfig(window_requests=100, window_s=10, block_size_tokens=B))
    feed(t2, 0, prompt(1, 2))
    assert feed(t2, 5, prompt(1, 2)) == 2 * B
    assert feed(t2, 16, prompt(1, 2)) == 0  # both earlier ones are older than 10 s
    assert t2.num_requests == 1


def test_window_match_equals_brute_force() -> None:
    rng = random.Random(3)
    cfg = TrafficConfig(window_requests=7, window_s=1e9, block_size_tokens=B)
    t = TrafficShape(cfg)
    history: list[list[int]] = []
    for i in range(400):
        blocks = [rng.randrange(3) for _ in range(rng.randrange(1, 6))]
        hashes = prompt(*blocks)
        window = history[-7:]  # the 7 requests before this one
        best = 0
        for earlier in window:
            n = 0
            while n < min(len(earlier), len(hashes)) and earlier[n] == hashes[n]:
                n += 1
            best = max(best, n)
        assert feed(t, i, hashes) == best * B
        history.append(hashes)
    assert t._index.num_blocks <= 2 * 7 * 5 + 1024  # swept, bounded
    assert t._index.num_runs <= 4 * 7 + 1024


def test_shares_hit_ratio_and_prediction_error() -> None:
    t = TrafficShape(TrafficConfig(window_requests=10, block_size_tokens=B))
    t.observe(0, workload="agent", backend="a", usage_prompt_tokens=100, reported_cached_tokens=80)
    t.observe(0, workload="chat", backend="a", usage_prompt_tokens=100, reported_cached_tokens=20)
    t.observe(0, workload="chat", backend="b", usage_prompt_tokens=50)  # no engine report
    t.observe(
        0, workload="chat", backend="b", usage_prompt_tokens=200,
        reported_cached_tokens=100, predicted_cached_tokens=160,
    )  # fmt: skip
    t.observe(
        0, workload="chat", backend="b", usage_prompt_tokens=200,
        reported_cached_tokens=190, predicted_cached_tokens=160,
    )  # fmt: skip
    assert t.class_shares() == {"agent": 0.2, "chat": 0.8}
    assert t.overlap is None  # nothing tokenized
    a, b = t.backends["a"], t.backends["b"]
    assert a.hit_ratio == pytest.approx(0.5)
    assert b.hit_ratio == pytest.approx(290 / 400)  # the unreported request is left out
    assert b.mean_abs_error_tokens == pytest.approx((60 + 30) / 2)
    assert b.abs_error_ratio == pytest.approx(90 / 400)
    assert t.predicted_total == {"b": 320} and t.reported_total == {"b": 290}
    text = TrafficMetrics().exposition(t, 0).decode()
    assert 'kvroute:cache_predicted_tokens_total{backend="b"} 320' in text
    assert 'kvroute:cache_reported_tokens_total{backend="b"} 290' in text
    assert 'kvroute:cache_prediction_abs_error_tokens{backend="b"} 45' in text
    assert 'kvroute:traffic_class_share{class="agent"} 0.2' in text
    assert "\nkvroute:traffic_prefix_overlap_ratio " not in text  # no value without tokens


def test_band_crossing_warns_once_and_sets_the_gauge(caplog: pytest.LogCaptureFixture) -> None:
    cfg = TrafficConfig(window_requests=20, window_s=1e9, min_requests=10, band_hold_s=30)
    t = TrafficShape(cfg)
    metrics = TrafficMetrics()
    caplog.set_level(logging.INFO, logger="kvroute.gateway.traffic")
    clock = 0.0

    def run(num: int, shared: bool) -> None:
        nonlocal clock
        for _ in range(num):
            clock += 1.0
            # shared: 9 of 10 blocks are a common system prompt; else all unique
            head = [0] * 9 if shared else [int(clock * 1000) + i for i in range(9)]
            feed(t, clock, prompt(*head, int(clock)))

    run(40, shared=False)  # overlap 0 %: below 40 % for 30 s after the 10th request
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert t.band is VerdictLevel.EQUIVALENT and len(warnings) == 1
    assert "below 40%" in warnings[0].getMessage()
    run(40, shared=False)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1  # once
    run(12, shared=True)  # a short burst of sharing: overlap rises, not held long enough
    assert t.band is VerdictLevel.EQUIVALENT
    run(60, shared=True)  # stays at 90 %: a new crossing, one new warning
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert t.band is VerdictLevel.RADIX_PAYS and len(warnings) == 2
    assert "above 60%" in warnings[1].getMessage() and "SGLang" in warnings[1].getMessage()
    text = metrics.exposition(t, clock).decode()
    assert 'kvroute:traffic_overlap_band{band="radix_pays"} 1' in text
    assert 'kvroute:traffic_overlap_band{band="equivalent"} 0' in text
    assert 'kvroute:traffic_band_changes_total{band="radix_pays"} 1' in text
    assert band_of(0.5) is VerdictLevel.GREY_ZONE


def test_traffic_config_is_read_and_checked() -> None:
    base = "backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n"
    cfg = parse_config(base + "traffic: {window_requests: 50, band_hold_s: 5}\n", "gw.yaml")
    assert cfg.traffic == TrafficConfig(window_requests=50, band_hold_s=5.0)
    for bad, field in (
        ("traffic: {window: 5}", "traffic.window"),
        ("traffic: {window_s: 0}", "traffic.window_s"),
        ("traffic: {window_requests: 10, min_requests: 20}", "traffic.min_requests"),
    ):
        with pytest.raises(InputError) as info:
            parse_config(base + bad + "\n", "gw.yaml")
        assert field in str(info.value) and "gw.yaml:2" in str(info.value)


def test_status_page_through_the_gateway(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    config = (
        "backends:\n"
        f"  - {{name: f1, url: '{fake.url}', engine: vllm}}\n"
        f"  - {{name: f2, url: '{fake2.url}', engine: vllm}}\n"
        "routes: [{name: r, pool: default, policy: cache_aware}]\n"
        "traffic: {min_requests: 5, band_hold_s: 0.001}\n"
    )
    system = "You answer questions about the hardware store, politely and briefly. " * 30
    with running_gateway(loop_thread, config) as gw, httpx.Client(base_url=gw.url) as client:
        for i in range(12):
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": f"question {i}"},
            ]
            r = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
            assert r.status_code == 200
        data = client.get("/kvroute/status", params={"format": "json"}).json()
        page = client.get("/kvroute/status")
        metrics = client.get("/metrics").text
    assert data["window"]["num_requests"] == 12 and data["window"]["num_tokenized"] == 12
    assert data["prefix_overlap"] > 0.75  # 11 of 12 prompts repeat a ~500-token system prompt
    assert data["band"] == "radix_pays" and data["class_shares"] == {"chat": 1.0}
    assert set(data["backends"]) == {"f1", "f2"}  # an idle one is listed too
    assert page.headers["content-type"].startswith("text/html")
    assert "Live traffic shape" in page.text and "radix_pays" in page.text
    assert 'kvroute:traffic_overlap_band{band="radix_pays"} 1' in metrics
    assert "kvroute:traffic_prefix_overlap_ratio 0.8" in metrics or (
        "kvroute:traffic_prefix_overlap_ratio 0.9" in metrics
    )


def test_status_without_tokenization_says_so(loop_thread: LoopThread, fake: FakeUpstream) -> None:
    config = f"backends: [{{name: f1, url: '{fake.url}', engine: vllm}}]\n"
    with running_gateway(loop_thread, config) as gw, httpx.Client(base_url=gw.url) as client:
        r = client.post("/v1/completions", json={"model": "m", "prompt": "hi"})
        assert r.status_code == 200
        data = client.get("/kvroute/status?format=json").json()
    assert data["prefix_overlap"] is None and "no cache_aware route" in data["overlap_note"]
    assert data["class_shares"] == {"completion": 1.0}
    html = status_html(data).decode()
    assert "no cache_aware route" in html and "<script" not in html


def test_overlap_from_capture_without_a_cache_aware_route(
    loop_thread: LoopThread, fake: FakeUpstream, tmp_path: Path
) -> None:
    """A round-robin gateway that captures: the window takes each prompt's blocks from
    capture's worker, so the overlap is measured without any routing tokenization."""
    config = (
        f"backends: [{{name: f1, url: '{fake.url}', engine: vllm}}]\n"
        f"capture: {{directory: '{tmp_path}', block_size_tokens: 16}}\n"
        "traffic: {min_requests: 5, band_hold_s: 0.001}\n"
    )
    system = "You answer questions about the hardware store, politely and briefly. " * 30
    with running_gateway(loop_thread, config) as gw, httpx.Client(base_url=gw.url) as client:
        for i in range(12):
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": f"question {i}"},
            ]
            r = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
            assert r.status_code == 200
        deadline = time.monotonic() + 10.0
        while True:  # capture's worker hands its records over every flush interval
            data = client.get("/kvroute/status", params={"format": "json"}).json()
            settled = data["window"]["num_requests"] == 12 and data["band"] is not None
            if settled or time.monotonic() > deadline:  # the band settles after band_hold_s
                break
            time.sleep(0.05)
    assert data["window"]["num_requests"] == 12 and data["window"]["num_tokenized"] == 12
    assert data["prefix_overlap"] > 0.75  # 11 of 12 prompts repeat a ~500-token system prompt
    assert data["band"] == "radix_pays" and data["class_shares"] == {"chat": 1.0}
    assert data["overlap_note"] is None


def test_status_numbers_of_an_idle_window() -> None:
    t = TrafficShape(TrafficConfig(window_s=10))
    feed(t, 0, prompt(1))
    data = status(t, 100, ["b1"])
    assert data["window"]["num_requests"] == 0  # aged out on read
    assert data["backends"]["b1"]["requests"] == 0  # idle, but listed
    page = status_html(data).decode()
    assert "<td>b1</td><td>0</td>" in page and "http-equiv=refresh" in page


def test_an_empty_window_on_a_tokenizing_gateway_says_not_yet_rather_than_never() -> None:
    t = TrafficShape(TrafficConfig())
    data = status(t, 0.0, ["b1"], tokenizes=True)
    assert data["overlap_note"].startswith("prefix overlap not measured yet")
    page = status_html(data).decode()
    assert "no cache_aware route" not in page and "no request in the window yet" in page
    assert status(t, 0.0)["overlap_note"].startswith("prefix overlap not measured: no cache_aware")


def test_the_page_says_a_band_is_settling_rather_than_none() -> None:
    t = TrafficShape(TrafficConfig(min_requests=2, band_hold_s=600))
    for i in range(4):
        feed(t, float(i), prompt(1))
    data = status(t, 4.0)
    assert data["band"] is None and data["band_now"] is not None
    page = status_html(data).decode()
    assert f"settling on {data['band_now']}" in page and "Band: none" not in page


def test_the_status_keeps_the_last_minutes_per_backend_and_the_page_shows_them() -> None:
    t = TrafficShape(TrafficConfig(window_s=30))
    # minute 0: two requests on b1, the second repeating the first's blocks
    feed(t, 1.0, prompt(1, 2), usage_prompt_tokens=32, reported_cached_tokens=0)
    feed(t, 2.0, prompt(1, 2), usage_prompt_tokens=32, reported_cached_tokens=32)
    # minute 2: one request on b2, no engine report; minute 1 idle
    feed(t, 125.0, prompt(7), backend="b2")
    data = status(t, 130.0, ["b1", "b2", "b3"])
    assert data["window"]["num_requests"] == 1  # the window forgot minute 0; history did not
    minutes = data["history"]["minutes"]
    assert [m["age_min"] for m in minutes] == [0, 1, 2]
    assert [m["requests"] for m in minutes] == [1, 0, 2]
    assert minutes[2]["prefix_overlap"] == 0.5  # 32 of 64 tokens already in the window
    assert minutes[1]["prefix_overlap"] is None  # nothing tokenized that minute
    assert minutes[2]["backends"]["b1"] == {"requests": 2, "hit_ratio": 0.5}
    assert minutes[0]["backends"]["b2"] == {"requests": 1, "hit_ratio": None}
    assert minutes[0]["backends"]["b3"] == {"requests": 0, "hit_ratio": None}  # idle, listed
    page = status_html(data).decode()
    assert "<h2>Last minutes</h2>" in page
    assert "<td>2 min ago</td>" in page and "<td class=n>2 · 50.0\xa0%</td>" in page
    assert (
        status_html(status(TrafficShape(TrafficConfig()), 0.0))
        .decode()
        .count("No request answered yet")
        == 1
    )


def test_history_keeps_half_an_hour() -> None:
    t = TrafficShape(TrafficConfig())
    for minute in range(45):
        feed(t, minute * 60.0, prompt(minute))
    minutes = status(t, 44 * 60.0)["history"]["minutes"]
    assert len(minutes) == 30 and minutes[-1]["age_min"] == 29


# -- real llama-server replicas ----------------------------------------------------------


@pytest.mark.engine
@pytest.mark.llamacpp
def test_predicted_and_reported_hits_on_llama_server(
    loop_thread: LoopThread, llamacpp_pool: list[EngineRecord]
) -> None:
    """Multi-turn sessions through cache_aware over two replicas: the predicted hits
    exported are the ones the route headers announced, the reported ones are the
    engines' own, and the model is roughly right on a real llama-server."""
    backends = "".join(
        f"  - {{name: {r.name}, url: '{r.base_url}', engine: llamacpp, "
        "cache: {slots: 4, capacity_tokens: 8192, cache_ram_mib: 0}}\n"
        for r in llamacpp_pool
    )
    config = f"backends:\n{backends}routes: [{{name: r, pool: default, policy: cache_aware}}]\n"
    tag = f"Run {random.randrange(10**9)}."
    announced = 0
    with (
        running_gateway(loop_thread, config) as gw,
        httpx.Client(base_url=gw.url, timeout=120) as c,
    ):
        for turn in range(3):
            for s in range(3):
                messages = [{"role": "system", "content": f"{tag} Shop {s}. " + "Be brief. " * 40}]
                for k in range(turn + 1):
                    messages.append({"role": "user", "content": f"Question {k} of session {s}?"})
                body = {"model": llamacpp_pool[0].model_name, "messages": messages,
                        "max_tokens": 1, "temperature": 0}  # fmt: skip
                r = c.post("/v1/chat/completions", json=body, headers={"x-session-id": str(s)})
                assert r.status_code == 200
                hits = dict(
                    h.split(":") for h in r.headers["x-kvroute-route"].split()[2][4:].split(",")
                )
                announced += int(hits[r.headers["x-kvroute-backend"]])
        data = c.get("/kvroute/status?format=json").json()
        metrics = c.get("/metrics").text
        engine_cached = sum(gw.gateway.metrics.cached_tokens.values.values())
    rows = data["backends"].values()
    predicted = sum(b["predicted_cached_tokens"] for b in rows)
    reported = sum(b["reported_cached_tokens"] for b in rows)
    prompt_tokens = sum(b["prompt_tokens"] for b in rows)
    print(f"predicted {predicted}, reported {reported}, prompt {prompt_tokens}", data["backends"])
    assert sum(b["predicted_requests"] for b in rows) == 9
    assert predicted == announced and reported == engine_cached
    assert reported > 0.3 * prompt_tokens  # follow-up turns hit the replica's slot
    assert abs(predicted - reported) < 0.25 * prompt_tokens  # the model is roughly right
    assert "kvroute:cache_reported_tokens_total{backend=" in metrics
