"""The pool of keep-alive connections to one backend: the real :class:`Transport`."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

from kvroute.errors import UsageError
from kvroute.http.client.base import Exchange, FailureKind, UpstreamFailure, UpstreamRequest
from kvroute.http.client.connection import PooledConnection
from kvroute.http.client.exchange import PooledExchange


class PooledTransport:
    """Keep-alive connections to the backend at ``base_url`` (``http://host:port``).

    At most ``max_idle`` idle connections are kept; there is no cap on connections in
    use (admission control bounds concurrency before requests get here).
    """

    def __init__(self, base_url: str, *, max_idle: int = 256) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise UsageError(f"backend URL must be http://host[:port], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self._host_header = parts.netloc
        self._prefix = parts.path.rstrip("/")
        self._idle: list[PooledConnection] = []
        self._all: set[PooledConnection] = set()
        self._max_idle = max_idle

    async def send(
        self, request: UpstreamRequest, *, connect_timeout_s: float, head_timeout_s: float | None
    ) -> Exchange:
        data = self._encode(request)
        conn = self._take_idle()
        if conn is not None:
            exchange = self._start(conn, data)
            try:
                await _head_of(exchange, head_timeout_s)
                return exchange
            except UpstreamFailure as exc:
                # A kept-alive connection the backend closed meanwhile: the request never
                # reached it, so sending it again on a fresh connection is safe.
                if exc.kind is not FailureKind.RESET or exc.response_started:
                    raise
        conn = await self._connect(connect_timeout_s)
        exchange = self._start(conn, data)
        await _head_of(exchange, head_timeout_s)
        return exchange

    def _encode(self, request: UpstreamRequest) -> bytes:
        lines = [
            f"{request.method} {self._prefix}{request.path} HTTP/1.1\r\n"
            f"host: {self._host_header}\r\ncontent-length: {len(request.body)}\r\n"
        ]
        lines.extend(f"{name}: {value}\r\n" for name, value in request.headers)
        lines.append("\r\n")
        return "".join(lines).encode("latin-1") + request.body

    def _take_idle(self) -> PooledConnection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, timeout_s: float) -> PooledConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: PooledConnection(self), self.host, self.port),
                timeout_s,
            )
        except TimeoutError:
            raise UpstreamFailure(
                FailureKind.CONNECT,
                f"connect timed out after {timeout_s} s",
                response_started=False,
            ) from None
        except OSError as exc:
            raise UpstreamFailure(
                FailureKind.CONNECT, f"{type(exc).__name__}: {exc}", response_started=False
            ) from None
        self._all.add(conn)
        return conn

    def _start(self, conn: PooledConnection, data: bytes) -> PooledExchange:
        exchange = PooledExchange(conn)
        conn.exchange = exchange
        assert conn.transport is not None
        conn.transport.write(data)
        return exchange

    def release(self, conn: PooledConnection) -> None:
        if len(self._idle) < self._max_idle:
            self._idle.append(conn)
        else:
            conn.abort()

    def forget(self, conn: PooledConnection) -> None:
        self._all.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    @property
    def num_open(self) -> int:
        return len(self._all)

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()


async def _head_of(exchange: PooledExchange, timeout_s: float | None) -> None:
    """Wait for the response head; a caller cancelled meanwhile (its client left) aborts
    the connection, so the engine sees its socket close and stops generating (a
    non-streamed answer has no head until generation is done)."""
    try:
        await exchange.wait_head(timeout_s)
    except asyncio.CancelledError:
        exchange.abort()
        raise
