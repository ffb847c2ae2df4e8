"""The HTTP/1.1 server on raw sockets: keep-alive, pipelining, framing errors, 413."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.harness import LoopThread
from kvroute.http.messages import HttpRequest, IteratorStream, Response
from kvroute.http.server import HttpServer, ServerLimits


def no_context(request_id: str) -> None:
    return None


async def app(request: HttpRequest[None]) -> Response:
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
    server = HttpServer(app, no_context, ServerLimits(max_body_bytes=100))
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
    server = HttpServer(app, no_context)
    loop_thread.run(server.start("127.0.0.1", 0))
    assert loop_thread.run(server.shutdown(1)) == 0


def test_shutdown_keeps_listening_while_a_stream_finishes(loop_thread: LoopThread) -> None:
    """During the drain new connections are answered (the handler sees ``draining``)
    with ``connection: close``; the listener closes once the stream is done."""
    release = asyncio.Event()

    async def slow_app(request: HttpRequest[None]) -> Response:
        if request.path == "/slow":

            async def pieces() -> AsyncIterator[bytes]:
                yield b"first"
                await release.wait()
                yield b"last"

            return Response(200, [], stream=IteratorStream(pieces()))
        return Response(200, [], b"draining=%d" % server.draining)

    server = HttpServer(slow_app, no_context)
    loop_thread.run(server.start("127.0.0.1", 0))
    port = server.port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"first" not in head:
            head += s.recv(65536)
        cut = asyncio.run_coroutine_threadsafe(server.shutdown(30), loop_thread.loop)
        time.sleep(0.1)
        during = exchange(port, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        loop_thread.loop.call_soon_threadsafe(release.set)
        assert cut.result(5) == 0
        tail = s.recv(65536)
    assert during.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in during
    assert during.endswith(b"draining=1")
    assert tail.endswith(b"4\r\nlast\r\n0\r\n\r\n")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_end_drain_cuts_what_is_still_running(loop_thread: LoopThread) -> None:
    async def endless_app(request: HttpRequest[None]) -> Response:
        async def pieces() -> AsyncIterator[bytes]:
            yield b"first"
            await asyncio.Event().wait()

        return Response(200, [], stream=IteratorStream(pieces()))

    server = HttpServer(endless_app, no_context)
    loop_thread.run(server.start("127.0.0.1", 0))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        while b"first" not in s.recv(65536):
            pass
        cut = asyncio.run_coroutine_threadsafe(server.shutdown(30), loop_thread.loop)
        time.sleep(0.1)
        started = time.monotonic()
        loop_thread.loop.call_soon_threadsafe(server.end_drain)
        assert cut.result(5) == 1
    assert time.monotonic() - started < 2  # not the 30 s drain timeout
