"""One pooled connection's response parsing: framing, pieces cut anywhere, receive
times, malformed responses, and what a connection closing means."""

from __future__ import annotations

from typing import Any

import pytest

from kvroute.errors import UsageError
from kvroute.http.client import (
    FailureKind,
    Origin,
    PooledConnection,
    PooledTransport,
    UpstreamFailure,
    UpstreamRequest,
)


class Recorder:
    """A ResponseReceiver that keeps what it was given, with the times."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.times: list[tuple[str, float]] = []
        self.ended = False
        self.failure: UpstreamFailure | None = None

    def on_head(self, status: int, headers: dict[str, str], t: float) -> None:
        self.status, self.headers = status, headers
        self.times.append(("head", t))

    def on_body(self, data: bytes, t: float) -> None:
        self.body += data
        self.times.append(("body", t))

    def on_end(self, t: float) -> None:
        self.ended = True
        self.times.append(("end", t))

    def on_failure(self, failure: UpstreamFailure, t: float) -> None:
        assert self.failure is None and not self.ended, "a response ends once"
        self.failure = failure


class FakeSocket:
    """The asyncio transport under a connection, driven by hand."""

    def __init__(self, conn: PooledConnection) -> None:
        self.conn = conn
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            self.conn.connection_lost(None)

    def get_extra_info(self, name: str) -> Any:
        return None

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def connection() -> tuple[PooledTransport, PooledConnection, FakeSocket, Ticks]:
    ticks = Ticks()
    pool = PooledTransport("http://127.0.0.1:1", clock=ticks)
    conn = PooledConnection(pool)
    sock = FakeSocket(conn)
    conn.connection_made(sock)  # type: ignore[arg-type]
    return pool, conn, sock, ticks


def feed(pieces: list[bytes]) -> tuple[Recorder, PooledTransport, PooledConnection, FakeSocket]:
    pool, conn, sock, ticks = connection()
    rec = Recorder()
    conn.send(b"GET / HTTP/1.1\r\n\r\n", rec)
    for i, piece in enumerate(pieces):
        ticks.now = float(i + 1)
        conn.data_received(piece)
    return rec, pool, conn, sock


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n"
    b"7;ext=1\r\n, world\r\n"
    b"0\r\nX-Trailer: 1\r\n\r\n"
)


def test_chunked_whole_and_split_at_every_point_and_the_connection_goes_back_idle() -> None:
    for cut in range(1, len(CHUNKED)):
        rec, pool, conn, sock = feed([CHUNKED[:cut], CHUNKED[cut:]])
        assert (rec.status, rec.body, rec.ended, rec.failure) == (
            200,
            b"hello, world",
            True,
            None,
        ), cut
        assert rec.headers["content-type"] == "text/event-stream"
        assert not sock.aborted and pool.num_idle == 1 and conn.receiver is None


def test_chunked_byte_by_byte() -> None:
    rec, *_ = feed([CHUNKED[i : i + 1] for i in range(len(CHUNKED))])
    assert rec.body == b"hello, world" and rec.ended


def test_each_piece_carries_the_clock_reading_of_the_socket_read_it_came_in() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    rec, *_ = feed([head + b"2\r\nab\r\n", b"2\r\ncd\r\n", b"0\r\n\r\n"])
    assert rec.times == [("head", 1.0), ("body", 1.0), ("body", 2.0), ("end", 3.0)]


def test_content_length_with_connection_close_ends_and_drops_the_connection() -> None:
    raw = b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\nConnection: close\r\n\r\nboom"
    rec, pool, _, sock = feed([raw[:20], raw[20:]])
    assert (rec.status, rec.body, rec.ended, rec.failure) == (500, b"boom", True, None)
    assert sock.aborted and pool.num_idle == 0


def test_a_body_framed_by_the_connections_end_completes_when_it_closes() -> None:
    rec, _, conn, _ = feed([b"HTTP/1.0 200 OK\r\n\r\nsome", b" body"])
    assert not rec.ended
    conn.connection_lost(None)
    assert rec.body == b"some body" and rec.ended and rec.failure is None


def test_a_body_framed_by_the_end_is_not_complete_when_we_aborted_it() -> None:
    rec, _, conn, _ = feed([b"HTTP/1.0 200 OK\r\n\r\nsome"])
    conn.abort()
    assert not rec.ended and rec.failure is not None and rec.failure.kind is FailureKind.RESET


def test_close_mid_chunked_body_is_a_reset_after_the_response_started() -> None:
    rec, _, conn, _ = feed([CHUNKED[:80]])
    conn.connection_lost(ConnectionResetError("peer"))
    assert rec.failure is not None and rec.failure.kind is FailureKind.RESET
    assert rec.failure.response_started


@pytest.mark.parametrize(
    "raw",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX",
        b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n",
    ],
)
def test_malformed_responses_fail_once_and_drop_the_connection(raw: bytes) -> None:
    rec, pool, _, sock = feed([raw])
    assert rec.failure is not None and rec.failure.kind is FailureKind.MALFORMED
    assert sock.aborted and pool.num_idle == 0


def test_bytes_on_an_idle_connection_make_it_unusable() -> None:
    _, pool, conn, sock = feed([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    assert pool.num_idle == 1
    conn.data_received(b"HTTP/1.1 200 OK\r\n")
    assert sock.aborted and pool.num_idle == 0


def test_origin_and_request_bytes() -> None:
    origin = Origin.parse("http://127.0.0.1:8080/prefix/")
    assert (origin.tls, origin.host, origin.port, origin.path_prefix) == (
        False,
        "127.0.0.1",
        8080,
        "/prefix",
    )
    raw = origin.encode(
        UpstreamRequest("POST", "/v1/chat/completions", (("authorization", "Bearer k"),), b"{}")
    )
    assert raw.startswith(b"POST /prefix/v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n")
    assert raw.endswith(b"content-length: 2\r\nauthorization: Bearer k\r\n\r\n{}")
    https = Origin.parse("https://example.org")
    assert https.tls and https.port == 443
    for bad in ("ftp://x", "http://", "http://h:port"):
        with pytest.raises(UsageError):
            Origin.parse(bad)
