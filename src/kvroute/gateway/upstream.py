"""The upstream client: pooled keep-alive HTTP/1.1 connections to one backend each.

This is the gateway's network seam. :class:`Transport` is what the proxy talks to
(tests can hand it any implementation); :class:`PooledTransport` is the real one:
raw asyncio protocols with httptools' response parser. Received body pieces are
queued in the protocol callback and handed out batched (everything that arrived
since the last read), so a busy stream costs one wake-up per read, not per piece.
The queue is bounded: past ``_HIGH_WATER`` bytes the socket stops being read
(back-pressure reaches the engine), and it resumes once the reader catches up.

Every failure is an :class:`UpstreamFailure` whose ``kind`` says what happened and
whether any response byte had arrived (which decides whether a retry is safe).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

from kvroute.errors import UsageError

_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024


class FailureKind(enum.Enum):
    CONNECT = "connect"
    """Nothing accepted the connection (refused, unreachable, connect timeout)."""
    RESET = "reset"
    """The connection closed or reset before the response ended."""
    FIRST_BYTE_TIMEOUT = "first_token_timeout"
    TOTAL_TIMEOUT = "total_timeout"
    MALFORMED = "malformed"
    STATUS = "status"
    """The backend answered 502/503/504: overloaded, loading, or failing."""


class UpstreamFailure(Exception):
    def __init__(self, kind: FailureKind, detail: str, *, response_started: bool) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail
        self.response_started = response_started


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class Exchange(Protocol):
    """One request in flight on one connection.

    The body is taken either by :meth:`read` calls, or — for streams, after any
    reads — pushed to a callback given to :meth:`attach`, straight from the socket's
    protocol callback (no task switch per piece); :meth:`finished` then waits for the
    end. Timeouts raise :class:`UpstreamFailure`
    ``TOTAL_TIMEOUT`` and abort the connection.
    """

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> dict[str, str]: ...

    async def read(self, timeout_s: float | None) -> bytes | None:
        """Everything received since the last read; None at the end of the body."""
        ...

    def attach(self, on_data: Callable[[bytes], None]) -> None:
        """Hand every further body piece to ``on_data`` as it arrives (what is
        buffered now goes first, synchronously)."""
        ...

    async def finished(self, timeout_s: float) -> None:
        """Wait for the end of the body, at most ``timeout_s``; raise
        :class:`UpstreamFailure` if it fails first."""
        ...

    def pause(self) -> None:
        """Stop reading the socket (the consumer cannot keep up)."""
        ...

    def resume(self) -> None: ...

    def abort(self) -> None:
        """Drop the connection now (the engine sees its client go and stops work).
        Harmless after the response ended."""
        ...


class Transport(Protocol):
    """Sends requests to one backend."""

    async def send(
        self, request: UpstreamRequest, *, connect_timeout_s: float, head_timeout_s: float | None
    ) -> Exchange:
        """Send ``request`` and wait for the response head."""
        ...

    async def aclose(self) -> None: ...


class _Exchange:
    __slots__ = (
        "_buf",
        "_conn",
        "_done",
        "_error",
        "_head",
        "_num_buffered",
        "_on_data",
        "_waiter",
        "headers",
        "response_started",
        "status",
    )

    def __init__(self, conn: _UpstreamConnection) -> None:
        self._conn = conn
        self._head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buf: deque[bytes] = deque()
        self._num_buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._on_data: Callable[[bytes], None] | None = None
        self._done = False
        self._error: UpstreamFailure | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.response_started = False

    # called by the connection
    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, data: bytes) -> None:
        if self._on_data is not None:
            self._on_data(data)
            return
        self._buf.append(data)
        self._num_buffered += len(data)
        if self._num_buffered > _HIGH_WATER:
            self._conn.pause_reading()
        self._wake()

    def on_end(self) -> None:
        self._done = True
        self._on_data = None  # no more data; and no reference cycle left for the GC
        self._wake()

    def on_failure(self, failure: UpstreamFailure) -> None:
        if self._done:
            return
        self._error = failure
        self._on_data = None
        if not self._head.done():
            self._head.set_exception(failure)
            self._head.exception()  # mark retrieved: a caller may have given up already
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _on_timeout(self, what: str, kind: FailureKind) -> None:
        if self._done or self._error is not None:
            return
        self.on_failure(UpstreamFailure(kind, what, response_started=self.response_started))
        self._conn.abort()

    async def _wait(self, deadline_s: float | None, what: str, kind: FailureKind) -> None:
        """Wait for the next event (data, end, failure) or the deadline."""
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = (
            None if deadline_s is None else loop.call_at(deadline_s, self._on_timeout, what, kind)
        )
        try:
            await self._waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    # used by the proxy
    async def wait_head(self, timeout_s: float | None) -> None:
        if not self._head.done():
            deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
            timer = None
            if deadline is not None:
                timer = asyncio.get_running_loop().call_at(
                    deadline,
                    self._on_timeout,
                    f"no response head within {timeout_s:.3g} s",
                    FailureKind.FIRST_BYTE_TIMEOUT,
                )
            try:
                await self._head
            finally:
                if timer is not None:
                    timer.cancel()
        failure = self._head.exception()
        if failure is not None:
            raise failure

    async def read(self, timeout_s: float | None) -> bytes | None:
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        while not self._buf:
            if self._error is not None:
                raise self._error
            if self._done:
                return None
            await self._wait(deadline, f"no data within {timeout_s} s", FailureKind.TOTAL_TIMEOUT)
        data = self._buf[0] if len(self._buf) == 1 else b"".join(self._buf)
        self._buf.clear()
        if self._num_buffered > _LOW_WATER:
            self._conn.resume_reading()
        self._num_buffered = 0
        return data

    def attach(self, on_data: Callable[[bytes], None]) -> None:
        if self._buf:
            data = b"".join(self._buf)
            self._buf.clear()
            self._num_buffered = 0
            self._conn.resume_reading()
            on_data(data)
        self._on_data = on_data

    async def finished(self, timeout_s: float) -> None:
        deadline_s = asyncio.get_running_loop().time() + timeout_s
        while self._error is None and not self._done:
            await self._wait(
                deadline_s, "the response did not end in time", FailureKind.TOTAL_TIMEOUT
            )
        if self._error is not None:
            raise self._error

    def pause(self) -> None:
        self._conn.pause_reading()

    def resume(self) -> None:
        self._conn.resume_reading()

    def abort(self) -> None:
        if not self._done:
            self._conn.abort()


class _UpstreamConnection(asyncio.Protocol):
    def __init__(self, pool: PooledTransport) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self.exchange: _Exchange | None = None
        self.closed = False
        self._keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.exchange is None:  # bytes on an idle connection: it is unusable
            self.abort()
            return
        self.exchange.response_started = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(FailureKind.MALFORMED, f"malformed HTTP response: {exc}")
            self.abort()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        detail = repr(exc) if exc else "connection closed by the backend"
        self._fail(FailureKind.RESET, detail)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()
        if self.exchange is not None:
            self.exchange.on_head(self._parser.get_status_code(), self._headers)

    def on_body(self, body: bytes) -> None:
        if self.exchange is not None:
            self.exchange.on_body(body)

    def on_message_complete(self) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.on_end()
        self._parser = httptools.HttpResponseParser(self)
        if self._keep_alive and not self.closed:
            self._pool.release(self)
        else:
            self.abort()

    def _fail(self, kind: FailureKind, detail: str) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.on_failure(
                UpstreamFailure(kind, detail, response_started=exchange.response_started)
            )

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


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
        self._idle: list[_UpstreamConnection] = []
        self._all: set[_UpstreamConnection] = set()
        self._max_idle = max_idle

    async def send(
        self, request: UpstreamRequest, *, connect_timeout_s: float, head_timeout_s: float | None
    ) -> Exchange:
        data = self._encode(request)
        conn = self._take_idle()
        if conn is not None:
            exchange = self._start(conn, data)
            try:
                await exchange.wait_head(head_timeout_s)
                return exchange
            except UpstreamFailure as exc:
                # A kept-alive connection the backend closed meanwhile: the request never
                # reached it, so sending it again on a fresh connection is safe.
                if exc.kind is not FailureKind.RESET or exc.response_started:
                    raise
        conn = await self._connect(connect_timeout_s)
        exchange = self._start(conn, data)
        await exchange.wait_head(head_timeout_s)
        return exchange

    def _encode(self, request: UpstreamRequest) -> bytes:
        lines = [
            f"{request.method} {self._prefix}{request.path} HTTP/1.1\r\n"
            f"host: {self._host_header}\r\ncontent-length: {len(request.body)}\r\n"
        ]
        lines.extend(f"{name}: {value}\r\n" for name, value in request.headers)
        lines.append("\r\n")
        return "".join(lines).encode("latin-1") + request.body

    def _take_idle(self) -> _UpstreamConnection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, timeout_s: float) -> _UpstreamConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _UpstreamConnection(self), self.host, self.port),
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

    def _start(self, conn: _UpstreamConnection, data: bytes) -> _Exchange:
        exchange = _Exchange(conn)
        conn.exchange = exchange
        assert conn.transport is not None
        conn.transport.write(data)
        return exchange

    def release(self, conn: _UpstreamConnection) -> None:
        if len(self._idle) < self._max_idle:
            self._idle.append(conn)
        else:
            conn.abort()

    def forget(self, conn: _UpstreamConnection) -> None:
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
