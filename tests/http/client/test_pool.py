"""The connection pool against a real local server: LIFO reuse, the bound on
connections in use, spares opened ahead of need, prewarm, close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from kvroute.http.client import PooledConnection, PooledTransport, UpstreamFailure

REQUEST = b"GET /x HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n"


class Server:
    """Answers each request with ``ok`` after ``delay_s``; counts connections."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.num_accepted = 0
        self.in_flight = 0
        self.max_in_flight = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.num_accepted += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                await asyncio.sleep(self.delay_s)
                self.in_flight -= 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[str]:
    srv = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    finally:
        srv.close()


class Done:
    """A receiver that resolves a future at the end of its response."""

    def __init__(self) -> None:
        self.ended: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.body = b""

    def on_head(self, status: int, headers: dict[str, str], t: float) -> None: ...

    def on_body(self, data: bytes, t: float) -> None:
        self.body += data

    def on_end(self, t: float) -> None:
        self.ended.set_result(self.body)

    def on_failure(self, failure: UpstreamFailure, t: float) -> None:
        self.ended.set_exception(failure)


def run(go: Callable[[str, Server], Coroutine[Any, Any, Any]], server: Server) -> Any:
    async def main() -> Any:
        async with serving(server) as url:
            return await go(url, server)

    return asyncio.run(main())


async def one(pool: PooledTransport) -> PooledConnection:
    done = Done()
    conn = await pool.start(REQUEST, done, connect_timeout_s=5)
    assert await done.ended == b"ok"
    return conn


def test_idle_connections_are_reused_last_in_first_out() -> None:
    async def go(url: str, server: Server) -> None:
        pool = PooledTransport(url)
        first, second = Done(), Done()
        a = await pool.start(REQUEST, first, connect_timeout_s=5)
        b = await pool.start(REQUEST, second, connect_timeout_s=5)
        await first.ended
        await second.ended  # a went idle before b: b is the warmer one
        await asyncio.sleep(0)
        assert a is not b and pool.num_idle == 2
        assert await one(pool) is b and await one(pool) is b
        assert server.num_accepted == 2 and b.num_requests == 3
        await pool.aclose()

    run(go, Server())


def test_the_bound_on_connections_in_use_makes_a_request_wait_for_one_to_come_free() -> None:
    async def go(url: str, server: Server) -> None:
        pool = PooledTransport(url, max_connections=2)
        conns = await asyncio.gather(*(one(pool) for _ in range(6)))
        assert server.max_in_flight == 2 and server.num_accepted == 2
        assert len({id(c) for c in conns}) == 2
        await pool.aclose()

    run(go, Server(delay_s=0.05))


def test_start_idle_sends_nothing_when_no_connection_is_idle_or_the_bound_is_reached() -> None:
    async def go(url: str, server: Server) -> None:
        pool = PooledTransport(url, max_connections=1)
        assert pool.start_idle(REQUEST, Done()) is None
        assert await pool.prewarm(2, connect_timeout_s=5) == 1  # the bound holds for prewarm too
        busy = Done()
        assert pool.start_idle(REQUEST, busy) is not None
        assert pool.start_idle(REQUEST, Done()) is None  # one idle? no: the one is busy
        await busy.ended
        await pool.aclose()

    run(go, Server(delay_s=0.05))


def test_spares_open_ahead_of_need_and_none_are_left_after_close() -> None:
    async def go(url: str, server: Server) -> tuple[int, int, int]:
        pool = PooledTransport(url, spare=2)
        assert pool.start_idle(REQUEST, Done()) is None  # nothing idle yet: two start opening
        await asyncio.sleep(0.2)
        opened_first = pool.num_opened
        taken = Done()
        assert pool.start_idle(REQUEST, taken) is not None  # one taken: one more opens
        await asyncio.sleep(0.2)
        opened_then = pool.num_opened
        await taken.ended
        await pool.aclose()
        await asyncio.sleep(0.05)
        return opened_first, opened_then, pool.num_open

    first, then, open_after = run(go, Server())
    assert (first, then, open_after) == (2, 3, 0)


def test_a_refused_connect_is_an_upstream_failure_and_frees_its_place() -> None:
    async def go() -> None:
        pool = PooledTransport("http://127.0.0.1:9", max_connections=1)
        for _ in range(2):  # the first failure must not hold the one place
            try:
                await pool.start(REQUEST, Done(), connect_timeout_s=5)
            except UpstreamFailure as exc:
                assert exc.kind.value == "connect" and not exc.response_started
            else:
                raise AssertionError("connected to a closed port")

    asyncio.run(go())
