"""The OpenAI streaming client: one request, its SSE stream read as it arrives.

Requests go out on :class:`~kvroute.http.client.PooledTransport` connections, their
responses pushed to a :class:`~kvroute.bench.client.stream_sink.StreamSink` from the
socket's callback with each piece's receive time (first byte, first token, chunks,
usage, llama.cpp timings), so no task switch sits between a token's arrival and its
timestamp.

:func:`send` runs one request with the first-token and total timeouts, the run's
deadline and an optional mid-stream abandon (closing the connection is the only way
to cancel an HTTP/1.1 stream; engines then stop generating). A reused keep-alive
connection that the server closed just before the request is retried once on a fresh
one, because nothing was processed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kvroute.bench.client.stream_sink import StreamSink
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.http.client import Clock, PooledConnection, PooledTransport, UpstreamFailure

_CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready to go: the whole HTTP request as bytes (encoded by the endpoint's
    transport before the run, so sending only writes them), and how to read it."""

    index: int
    payload: bytes
    keep_text: bool = False
    cancel_after_chunks: int | None = None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """``first_token_s``: from sending to the first token; ``total_s``: from sending to
    the end; None disables one. ``deadline`` (absolute, clock seconds) is the run's."""

    first_token_s: float | None = 60.0
    total_s: float | None = 300.0
    deadline: float | None = None


@dataclass(slots=True)
class InFlight:
    """A request on the wire: its connection, completion and timers."""

    conn: PooledConnection
    done: asyncio.Future[None]
    timers: list[asyncio.TimerHandle]
    reused: bool


def _sink(req: Prepared, rec: RequestRecord, t0: float) -> StreamSink:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    return StreamSink(
        rec, done, t0=t0, keep_text=req.keep_text, cancel_after_chunks=req.cancel_after_chunks
    )


def _started(
    conn: PooledConnection,
    sink: StreamSink,
    rec: RequestRecord,
    clock: Clock,
    t0: float,
    timeouts: Timeouts,
) -> InFlight:
    sink.abort = conn.abort
    sent = clock()
    if rec.sent_s is None:
        rec.sent_s = sent - t0
    loop = asyncio.get_running_loop()
    timers = _arm(loop, sink, rec, sent, timeouts, clock)
    return InFlight(conn, sink.done, timers, conn.num_requests > 1)


def begin(
    pool: PooledTransport,
    req: Prepared,
    rec: RequestRecord,
    *,
    clock: Clock,
    t0: float,
    timeouts: Timeouts,
) -> InFlight | None:
    """Write ``req`` now on an idle connection, synchronously (None when none is idle):
    a dispatcher sends in the loop step it woke in, not one step later behind every
    callback already queued."""
    sink = _sink(req, rec, t0)
    conn = pool.start_idle(req.payload, sink)
    return None if conn is None else _started(conn, sink, rec, clock, t0, timeouts)


async def send(
    pool: PooledTransport,
    req: Prepared,
    rec: RequestRecord,
    *,
    clock: Clock,
    t0: float,
    timeouts: Timeouts,
    started: InFlight | None = None,
) -> RequestRecord:
    """Send ``req`` (or finish one :func:`begin` started) and fill ``rec``, whose
    ``scheduled_s`` is already set. Never raises for network or server faults: they
    become the record's error kind."""
    for attempt in range(2):
        if started is None:
            sink = _sink(req, rec, t0)
            try:
                conn = await pool.start(req.payload, sink, connect_timeout_s=_CONNECT_TIMEOUT_S)
            except UpstreamFailure as exc:
                rec.fail(ErrorKind.CONNECT, exc.detail, clock() - t0)
                return rec
            started = _started(conn, sink, rec, clock, t0, timeouts)
        flight, started = started, None
        try:
            await flight.done
        finally:
            for timer in flight.timers:
                timer.cancel()
            if not flight.done.done():  # cancelled (Ctrl-C): the stream is abandoned
                flight.conn.abort()
        stale = flight.reused and rec.error_kind is ErrorKind.RESET and rec.first_byte_s is None
        if not (stale and attempt == 0):
            return rec
        rec.outcome, rec.error_kind, rec.error_detail, rec.end_s = Outcome.OK, None, "", None
        rec.num_retries += 1
    return rec


def _arm(
    loop: asyncio.AbstractEventLoop,
    sink: StreamSink,
    rec: RequestRecord,
    sent: float,
    timeouts: Timeouts,
    clock: Clock,
) -> list[asyncio.TimerHandle]:
    """Timers for the first-token and total timeouts and the run deadline (clock and
    the loop's time are both the monotonic clock, offset-corrected here)."""
    skew = loop.time() - clock()
    timers = []

    def fire(kind: ErrorKind, detail: str, only_before_token: bool) -> None:
        if only_before_token and rec.first_token_s is not None:
            return
        sink.expire(kind, detail, clock())

    limits: list[tuple[float, ErrorKind, str, bool]] = []
    if timeouts.first_token_s is not None:
        no_token = f"no token within {timeouts.first_token_s:g} s"
        limits.append(
            (sent + timeouts.first_token_s, ErrorKind.TIMEOUT_FIRST_TOKEN, no_token, True)
        )
    if timeouts.total_s is not None:
        not_done = f"not finished within {timeouts.total_s:g} s"
        limits.append((sent + timeouts.total_s, ErrorKind.TIMEOUT_TOTAL, not_done, False))
    if timeouts.deadline is not None:
        cut = "cut off by the run's time bound"
        limits.append((timeouts.deadline, ErrorKind.RUN_DEADLINE, cut, False))
    for at, kind, detail, only_before_token in limits:
        timers.append(loop.call_at(at + skew, fire, kind, detail, only_before_token))
    return timers
