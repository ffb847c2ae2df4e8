"""The HTTP/1.1 server on raw sockets: keep-alive, pipelining, framing errors, 413."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from gateway.harness import LoopThread
from kvroute.gateway.server import HttpServer, ServerLimits
from kvroute.gateway.types import IteratorStream, Request, Response


async def app(request: Request) -> Response:
    if request.path == "/stream":

        async def pieces():  # type: ignore[no-untyped-def]
            for i in range(3):
                yield b"piece%d" % i

        return Response(200, [("content-type", "text/plain")], stream=IteratorStream(pieces()))
    return Response(
        200, [("content-type", "text/plain")], request.method.encode() + b" " + request.body
    )


@pytest.fixture
def port(loop_thread: LoopThread) -> Iterator[int]:
    server = HttpServer(app, ServerLimits(max_body_bytes=100))
    loop_thread.run(server.start("127.0.0.1", 0))
    yield server.port
    loop_thread.run(server.shutdown(1))


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data``; return what arrives until the server closes or is quiet 0.3 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                got = s.recv(65536)
            except TimeoutError:
                return out
            if not got:
                return out
            out += got
            s.settimeout(0.3)


def test_keep_alive_and_pipelined_requests_answer_in_order(port: int) -> None:
    req = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"
    out = exchange(port, req + b"x" + req + b"y")
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.index(b"POST x") < out.index(b"POST y")


def test_streamed_body_is_chunked(port: int) -> None:
    out = exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"transfer-encoding: chunked" in out
    assert out.endswith(b"6\r\npiece0\r\n6\r\npiece1\r\n6\r\npiece2\r\n0\r\n\r\n")


def test_oversized_body_is_413_before_it_is_read(port: int) -> None:
    out = exchange(
        port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"z" * 1000
    )
    assert out.startswith(b"HTTP/1.1 413 Payload Too Large")
    assert b'"code":"request_too_large"' in out


def test_malformed_request_is_400(port: int) -> None:
    out = exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 Bad Request")


def test_shutdown_with_nothing_in_flight_cuts_nothing(loop_thread: LoopThread) -> None:
    server = HttpServer(app)
    loop_thread.run(server.start("127.0.0.1", 0))
    assert loop_thread.run(server.shutdown(1)) == 0
