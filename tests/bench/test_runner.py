"""Whole runs against the fake upstream: every fault reported per request and in the
summary, time bounds kept, schedules honoured, results written and read back."""

from __future__ import annotations

import signal
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from bench.fake_upstream import fake_upstream
from kvroute.bench.results.compare import compare
from kvroute.bench.results.record import ErrorKind, Outcome
from kvroute.bench.results.result import load_result, write_result
from kvroute.bench.run_options import BenchEndpoint, RunOptions, SideBySide
from kvroute.bench.runner import request_body, run_bench, workload_info
from kvroute.bench.schedule import Arrival, CancelSpec, ClosedLoop, OpenLoop
from kvroute.bench.scrape import CacheMode
from kvroute.bench.workloads.base import Api, BenchRequest, StructuredKind

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def reqs(
    faults: list[str], *, max_tokens: int = 4, depends: dict[int, int] | None = None
) -> list[BenchRequest]:
    out = []
    for i, fault in enumerate(faults):
        structured = StructuredKind.JSON_SCHEMA if fault == "json" else StructuredKind.NONE
        dep = (depends or {}).get(i)
        out.append(
            BenchRequest(
                i,
                "test",
                Api.CHAT,
                {"messages": [{"role": "user", "content": f"q{i}"}], "fault": fault},
                10,
                max_tokens,
                session_id="s" if dep is not None or i in (depends or {}).values() else None,
                depends_on=dep,
                think_s=0.05 if dep is not None else 0.0,
                structured=structured,
                schema=SCHEMA if structured is not StructuredKind.NONE else None,
            )
        )
    return out


def run(url: str, requests: list[BenchRequest], **opts: object) -> object:
    options = RunOptions(
        **{
            "loads": (ClosedLoop(4),),
            "first_token_timeout_s": 1.0,
            "timeout_s": 3.0,
            "max_duration_s": 10.0,
            "cache": CacheMode.WARM,
            **opts,
        }
    )  # type: ignore[arg-type]
    info = workload_info("test", {}, 0, "none", requests)
    return run_bench(requests, info, [BenchEndpoint("fake", url, model="ok")], options)


FAULTS = [
    "ok",
    "split",
    "malformed",
    "silent",
    "reset",
    "http500",
    "http400",
    "stream_error",
    "empty",
    "json",
    "plain",
]


def test_every_fault_is_reported_per_request_and_in_the_summary(tmp_path: Path) -> None:
    with fake_upstream() as up:
        t = time.monotonic()
        result = run(up.url, reqs(FAULTS))
        elapsed = time.monotonic() - t
    assert elapsed < 8
    (r,) = result.runs  # type: ignore[attr-defined]
    by = {rec.index: rec for rec in r.requests}
    kinds = {FAULTS[i]: (rec.outcome, rec.error_kind) for i, rec in by.items()}
    assert kinds["ok"] == (Outcome.OK, None) and kinds["split"] == (Outcome.OK, None)
    assert kinds["malformed"][1] is ErrorKind.MALFORMED_STREAM
    assert kinds["silent"][1] is ErrorKind.TIMEOUT_FIRST_TOKEN
    assert kinds["reset"][1] is ErrorKind.RESET
    assert kinds["http500"][1] is ErrorKind.HTTP_5XX and kinds["http400"][1] is ErrorKind.HTTP_4XX
    assert (
        kinds["stream_error"][1] is ErrorKind.STREAM_ERROR and kinds["empty"][1] is ErrorKind.EMPTY
    )
    assert (
        by[FAULTS.index("http500")].http_status == 500
        and "boom" in by[FAULTS.index("http500")].error_detail
    )
    s = r.summary
    assert s.num_ok == 4 and s.num_errors == 7
    assert s.errors == {
        "empty": 1,
        "http_4xx": 1,
        "http_5xx": 1,
        "malformed_stream": 1,
        "reset": 1,
        "stream_error": 1,
        "timeout_first_token": 1,
    }
    assert s.structured is not None and (s.structured.num_requests, s.structured.num_valid) == (
        1,
        1,
    )
    # The fake's usage says 4 of 10 prompt tokens were cached (no adapter: OpenAI usage).
    assert s.cache.response_hit_rate == pytest.approx(0.4) and r.endpoint.cache_state == "unknown"
    path = tmp_path / "r.json"
    write_result(result, path)  # type: ignore[arg-type]
    back = load_result(path)
    assert back.runs[0].summary == s
    assert [x.error_kind for x in back.runs[0].requests] == [x.error_kind for x in r.requests]
    assert back.runs[0].requests[0].usage_body is None  # raw bodies are not written


def test_a_hung_server_cannot_hold_the_run_past_its_bound() -> None:
    with fake_upstream() as up:
        t = time.monotonic()
        result = run(
            up.url,
            reqs(["hang"] * 6 + ["ok"] * 4),
            loads=(OpenLoop(4.0, Arrival.CONSTANT),),
            first_token_timeout_s=None,
            timeout_s=None,
            max_duration_s=1.0,
        )
        elapsed = time.monotonic() - t
    assert elapsed < 4
    s = result.runs[0].summary  # type: ignore[attr-defined]
    assert s.errors.get("run_deadline") == 4  # sent at 0, .25, .5, .75 s; still hanging at 1 s
    assert s.num_not_sent == 6  # due at 1 s and later


def test_unreachable_endpoint_reports_connect_errors_and_other_endpoints_still_run() -> None:
    with fake_upstream() as up:
        requests = reqs(["ok"] * 5)
        options = RunOptions(loads=(ClosedLoop(2),), cache=CacheMode.COLD, max_duration_s=5)
        result = run_bench(
            requests,
            workload_info("t", {}, 0, "none", requests),
            [
                BenchEndpoint("dead", "http://127.0.0.1:9"),
                BenchEndpoint("fake", up.url, model="ok"),
            ],
            options,
        )
    dead, live = result.runs
    assert dead.summary.errors == {"connect": 5} and any("models" in n for n in dead.endpoint.notes)
    assert live.summary.num_ok == 5


def test_cancel_share_abandons_streams_mid_way() -> None:
    with fake_upstream() as up:
        result = run(up.url, reqs(["slow"] * 12, max_tokens=6), cancel=CancelSpec(0.5, 2, 2))
    recs = result.runs[0].requests  # type: ignore[attr-defined]
    cancelled = [r for r in recs if r.outcome is Outcome.CANCELLED]
    assert 2 <= len(cancelled) <= 10
    assert all(len(r.chunk_times_s) == 2 for r in cancelled)
    assert all(
        r.outcome is Outcome.OK and len(r.chunk_times_s) == 6 for r in recs if r not in cancelled
    )


def test_open_loop_keeps_its_rate_and_measures_from_the_schedule() -> None:
    with fake_upstream() as up:
        result = run(up.url, reqs(["ok"] * 40), loads=(OpenLoop(40.0, Arrival.CONSTANT),))
    r = result.runs[0]  # type: ignore[attr-defined]
    assert r.summary.num_ok == 40
    assert [x.scheduled_s for x in r.requests][:3] == pytest.approx([0.0, 0.025, 0.05])
    # loose bounds: this catches a dispatcher that drifts or serialises, not jitter
    # (a shared machine at load 10 delays single sends by 20+ ms; bench/ measures that)
    assert r.summary.rates.achieved_share == pytest.approx(1.0, abs=0.1)
    assert r.summary.dispatch_delay_s.p99 < 0.1


@pytest.mark.parametrize("spin_s", [0.0, 0.002])
def test_open_loop_sends_in_order_never_early_with_or_without_spin(spin_s: float) -> None:
    with fake_upstream() as up:
        requests = reqs(["ok"] * 30, depends={5: 2})
        result = run(
            up.url,
            requests,
            loads=(OpenLoop(100.0, Arrival.CONSTANT),),
            dispatch_spin_s=spin_s,
        )
    recs = result.runs[0].requests  # type: ignore[attr-defined]
    assert all(r.outcome is Outcome.OK for r in recs)
    timed = [r for r in recs if r.index != 5]
    assert all(r.sent_s >= r.scheduled_s for r in timed)
    sent = [r.sent_s for r in sorted(timed, key=lambda r: r.scheduled_s)]
    assert sent == sorted(sent)
    # the follower waits for its predecessor's end plus think time, timer or not
    assert recs[5].scheduled_s >= recs[2].end_s + 0.05 - 1e-6


def test_closed_loop_users_and_dependencies() -> None:
    with fake_upstream() as up:
        requests = reqs(["slow"] * 6, max_tokens=2, depends={3: 0, 5: 3})
        result = run(up.url, requests, loads=(ClosedLoop(2),))
    recs = {r.index: r for r in result.runs[0].requests}  # type: ignore[attr-defined]
    assert all(r.outcome is Outcome.OK for r in recs.values())
    for i, dep in ((3, 0), (5, 3)):
        assert recs[i].scheduled_s >= recs[dep].end_s + 0.05 - 1e-6  # type: ignore[operator]
        assert recs[i].sent_s >= recs[i].scheduled_s - 1e-6  # type: ignore[operator]
    # Two users: never more than two requests in flight.
    events = sorted([(r.sent_s, 1) for r in recs.values()] + [(r.end_s, -1) for r in recs.values()])  # type: ignore[misc]
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 2


def test_sharded_workers_and_concurrent_side_by_side() -> None:
    with fake_upstream() as up:
        requests = reqs(["ok"] * 30)
        options = RunOptions(
            loads=(OpenLoop(60.0, Arrival.CONSTANT),),
            workers=2,
            cache=CacheMode.WARM,
            side_by_side=SideBySide.CONCURRENT,
            max_duration_s=10,
        )
        result = run_bench(
            requests,
            workload_info("t", {}, 0, "none", requests),
            [BenchEndpoint("a", up.url, model="ok"), BenchEndpoint("b", up.url, model="split")],
            options,
        )
        assert up.num_requests == 60
    a, b = result.runs
    assert a.summary.num_ok == b.summary.num_ok == 30
    assert [r.scheduled_s for r in a.requests] == [r.scheduled_s for r in b.requests]
    assert result.side_by_side == "concurrent"


def test_temperature_is_sent_when_asked_and_a_workloads_own_is_kept() -> None:
    r0 = reqs(["ok"])[0]
    plain = orjson.loads(request_body(r0, "m", RunOptions(loads=(ClosedLoop(1),)), None))
    greedy_opts = RunOptions(loads=(ClosedLoop(1),), temperature=0.0)
    greedy = orjson.loads(request_body(r0, "m", greedy_opts, None))
    own = replace(r0, body={**r0.body, "temperature": 0.7})
    kept = orjson.loads(request_body(own, "m", greedy_opts, None))
    assert "temperature" not in plain and greedy["temperature"] == 0.0
    assert kept["temperature"] == 0.7


def test_salted_bodies_and_compare_of_two_results() -> None:
    r0 = reqs(["ok"])[0]
    salted = request_body(r0, "m", RunOptions(loads=(ClosedLoop(1),), ignore_eos=True), "[run ab] ")
    assert (
        b'"content":"[run ab] q0"' in salted
        and b'"include_usage":true' in salted
        and b'"ignore_eos":true' in salted
    )
    with fake_upstream() as up:
        a = run(up.url, reqs(["ok"] * 20))
        b = run(up.url, reqs(["slow"] * 20, max_tokens=4))
    pairs = compare(a, b)  # type: ignore[arg-type]
    (pair,) = pairs
    e2e = next(d for d in pair.diffs if d.name == "E2E p50")
    assert (
        e2e.delta is not None
        and e2e.delta > 0.2
        and e2e.within_noise is False
        and e2e.better == "a"
    )
    same = compare(a, a)[0]  # type: ignore[arg-type]
    assert all(d.within_noise in (True, None) for d in same.diffs)


def test_a_run_gives_the_callers_sigint_handler_back() -> None:
    # The runner catches Ctrl-C itself while requests are on the wire; afterwards the
    # caller's own handler must be in place again (not Python's default).
    def mine(signum: int, frame: object) -> None:
        raise AssertionError("no SIGINT was sent")

    previous = signal.signal(signal.SIGINT, mine)
    try:
        requests = reqs(["ok"] * 2)
        for workers in (1, 2):
            result = run_bench(
                requests,
                workload_info("t", {}, 0, "none", requests),
                [BenchEndpoint("dead", "http://127.0.0.1:9")],
                RunOptions(loads=(ClosedLoop(2),), cache=CacheMode.WARM, workers=workers),
            )
            assert result.runs[0].summary.errors == {"connect": 2} and not result.interrupted
            assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)
