"""Sending one request: connection reuse, the stale-connection retry, timeouts, faults,
and times stamped when the bytes arrived."""

from __future__ import annotations

import asyncio
import json
import time

from bench.fake_upstream import fake_upstream
from kvroute.bench.client.send import Prepared, Timeouts, begin, send
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.bench.runner import request_headers
from kvroute.http.client import PooledTransport, UpstreamRequest

clock = time.monotonic


def send_to(
    url: str, fault: str, timeouts: Timeouts, *, times: int = 1
) -> tuple[list[RequestRecord], int]:
    """``times`` requests one after another on one pool; the records and how many
    connections the pool opened."""

    async def go() -> tuple[list[RequestRecord], int]:
        pool = PooledTransport(url, clock=clock)
        body = json.dumps({"model": fault, "max_tokens": 4, "stream": True}).encode()
        payload = pool.encode(
            UpstreamRequest("POST", "/v1/chat/completions", request_headers(None), body)
        )
        out = []
        for i in range(times):
            rec = RequestRecord(index=i, scheduled_s=0.0)
            out.append(
                await send(
                    pool, Prepared(i, payload), rec, clock=clock, t0=clock(), timeouts=timeouts
                )
            )
        await pool.aclose()
        return out, pool.num_opened

    return asyncio.run(go())


def test_send_reuses_the_connection_and_reads_split_crlf_streams() -> None:
    with fake_upstream() as up:
        recs, num_opened = send_to(up.url, "split", Timeouts(2, 5), times=3)
    assert [r.outcome for r in recs] == [Outcome.OK] * 3
    assert all(r.completion_tokens == 4 and len(r.chunk_times_s) == 4 for r in recs)
    assert num_opened == 1


def test_a_kept_alive_connection_dropped_under_a_request_is_retried_once_on_a_new_one() -> None:
    with fake_upstream() as up:
        recs, num_opened = send_to(up.url, "once", Timeouts(2, 5), times=2)
    assert [r.outcome for r in recs] == [Outcome.OK, Outcome.OK]
    assert [r.num_retries for r in recs] == [0, 1] and num_opened == 2


def test_first_token_is_stamped_when_it_arrived_not_when_the_head_did() -> None:
    with fake_upstream() as up:
        (rec,), _ = send_to(up.url, "late_token", Timeouts(2, 5))
    assert rec.outcome is Outcome.OK
    assert rec.first_byte_s is not None and rec.first_token_s is not None and rec.end_s is not None
    # the server holds the token back 0.3 s after the head; everything after comes at once
    assert 0.28 < rec.first_token_s - rec.first_byte_s < 0.6
    assert rec.end_s - rec.first_token_s < 0.05


def test_send_never_sending_server_times_out_at_first_token() -> None:
    with fake_upstream() as up:
        (rec,), _ = send_to(up.url, "silent", Timeouts(0.3, 5))
    assert rec.error_kind is ErrorKind.TIMEOUT_FIRST_TOKEN
    assert rec.end_s is not None and 0.29 < rec.end_s < 1.0


def test_total_timeout_cuts_a_slow_stream_and_drops_its_connection() -> None:
    with fake_upstream() as up:
        recs, num_opened = send_to(up.url, "slow", Timeouts(2, 0.12), times=2)
    assert [r.error_kind for r in recs] == [ErrorKind.TIMEOUT_TOTAL] * 2
    assert all(r.first_token_s is not None for r in recs)
    assert num_opened == 2  # a cut stream's connection is never reused


def test_send_reset_and_unreachable() -> None:
    with fake_upstream() as up:
        (rec,), _ = send_to(up.url, "reset", Timeouts(2, 5))
        assert rec.error_kind is ErrorKind.RESET
    (rec,), _ = send_to("http://127.0.0.1:9", "ok", Timeouts(2, 5))
    assert rec.error_kind is ErrorKind.CONNECT and rec.sent_s is None


def test_begin_writes_synchronously_on_an_idle_connection_only() -> None:
    async def go(url: str) -> tuple[bool, bool, RequestRecord]:
        pool = PooledTransport(url, clock=clock)
        payload = pool.encode(
            UpstreamRequest(
                "POST", "/v1/chat/completions", request_headers(None), b'{"max_tokens": 2}'
            )
        )
        t0 = clock()
        none_idle = begin(
            pool,
            Prepared(0, payload),
            RequestRecord(0, 0.0),
            clock=clock,
            t0=t0,
            timeouts=Timeouts(),
        )
        await pool.prewarm(1, connect_timeout_s=5)
        rec = RequestRecord(1, 0.0)
        flight = begin(pool, Prepared(1, payload), rec, clock=clock, t0=t0, timeouts=Timeouts())
        written_now = flight is not None and rec.sent_s is not None
        await send(
            pool, Prepared(1, payload), rec, clock=clock, t0=t0, timeouts=Timeouts(), started=flight
        )
        await pool.aclose()
        return none_idle is None, written_now, rec

    with fake_upstream() as up:
        nothing_idle, written_now, rec = asyncio.run(go(up.url))
    assert nothing_idle and written_now
    assert rec.outcome is Outcome.OK and rec.completion_tokens == 2
