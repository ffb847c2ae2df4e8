"""The pool of keep-alive connections to one backend: the real :class:`Transport`."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque

from kvroute.http.client.base import (
    Clock,
    Exchange,
    FailureKind,
    Origin,
    ResponseReceiver,
    UpstreamFailure,
    UpstreamRequest,
)
from kvroute.http.client.connection import PooledConnection
from kvroute.http.client.exchange import PooledExchange


class PooledTransport:
    """Keep-alive connections to the backend at ``base_url`` (``http(s)://host[:port]``,
    with an optional path prefix that every request path is appended to).

    Idle connections are reused last-in first-out, so a light load keeps few of them
    warm (llama-server holds an HTTP thread per open connection); at most ``max_idle``
    are kept. ``max_connections`` bounds the connections in use or being opened (None:
    no bound, where admission control bounds concurrency before requests get here); a
    request over the bound waits for one to come free. With ``spare`` > 0, taking a
    connection starts opening new ones in the background until ``spare`` are idle or
    on their way, so a rise in concurrency finds one ready instead of connecting on the
    send path. ``clock`` stamps every received piece (see :class:`ResponseReceiver`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_idle: int = 256,
        max_connections: int | None = None,
        spare: int = 0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.origin = Origin.parse(base_url)
        self.host = self.origin.host
        self.port = self.origin.port
        self.clock = clock
        self._ssl = ssl.create_default_context() if self.origin.tls else None
        self._idle: deque[PooledConnection] = deque()
        self._all: set[PooledConnection] = set()
        self._max_idle = max_idle
        self._max_busy = max_connections
        self._spare = spare
        self._num_busy = 0
        """Connections carrying a request or being opened for one."""
        self._num_opening_spare = 0
        self._spares: set[asyncio.Task[None]] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self.num_opened = 0

    # -- the awaited exchange (the gateway's proxy) -------------------------------------

    async def send(
        self, request: UpstreamRequest, *, connect_timeout_s: float, head_timeout_s: float | None
    ) -> Exchange:
        data = self.encode(request)
        conn = self._take_idle()
        if conn is not None:
            exchange = PooledExchange(conn)
            conn.send(data, exchange)
            try:
                await _head_of(exchange, head_timeout_s)
                return exchange
            except UpstreamFailure as exc:
                # A kept-alive connection the backend closed meanwhile: the request never
                # reached it, so sending it again on a fresh connection is safe.
                if exc.kind is not FailureKind.RESET or exc.response_started:
                    raise
        conn = await self._connect(connect_timeout_s)
        exchange = PooledExchange(conn)
        conn.send(data, exchange)
        await _head_of(exchange, head_timeout_s)
        return exchange

    # -- the pushed response (receivers) -------------------------------------------------

    def encode(self, request: UpstreamRequest) -> bytes:
        """``request`` as the bytes :meth:`start_idle` and :meth:`start` write."""
        return self.origin.encode(request)

    def start_idle(self, data: bytes, receiver: ResponseReceiver) -> PooledConnection | None:
        """Write an encoded request now on an idle connection, synchronously, its response
        going to ``receiver``; None when no connection is idle (or the bound is reached).
        A caller on a timer sends in the loop step it woke in, not one step later."""
        conn = self._take_idle()
        if conn is not None:
            conn.send(data, receiver)
        return conn

    async def start(
        self, data: bytes, receiver: ResponseReceiver, *, connect_timeout_s: float
    ) -> PooledConnection:
        """Like :meth:`start_idle`, waiting for a free connection under the bound or
        opening one. Raises :class:`UpstreamFailure` ``CONNECT`` when connecting fails."""
        while (conn := self._take_idle()) is None and self._at_bound():
            await self._place_freed()
        if conn is None:
            conn = await self._connect(connect_timeout_s)
        conn.send(data, receiver)
        return conn

    async def prewarm(self, num: int, *, connect_timeout_s: float) -> int:
        """Open up to ``num`` idle connections ahead of use (never past the bound); how
        many opened."""
        if self._max_busy is not None:
            num = min(num, self._max_busy - self._num_busy)
        opened = []
        for _ in range(num):
            try:
                opened.append(await self._connect(connect_timeout_s))
            except UpstreamFailure:
                break
        for conn in opened:
            self.release(conn)
        return len(opened)

    # -- connections ---------------------------------------------------------------------

    def _take_idle(self) -> PooledConnection | None:
        found = None
        while self._idle and (self._max_busy is None or self._num_busy < self._max_busy):
            conn = self._idle.pop()
            if not conn.closed:
                conn.idle = False
                self._num_busy += 1
                found = conn
                break
        if self._spare:
            self._top_up()
        return found

    async def _connect(self, timeout_s: float) -> PooledConnection:
        """A new connection, counted busy; waits first while the bound is reached."""
        while self._at_bound():
            await self._place_freed()
        self._num_busy += 1
        try:
            conn = await self._open(timeout_s)
        except BaseException:
            self._free_one()
            raise
        return conn

    def _at_bound(self) -> bool:
        return self._max_busy is not None and self._num_busy >= self._max_busy

    async def _place_freed(self) -> None:
        """Wait until a connection in use comes free (idle again, or closed)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    async def _open(self, timeout_s: float) -> PooledConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: PooledConnection(self), self.host, self.port, ssl=self._ssl
                ),
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
        self.num_opened += 1
        return conn

    def _top_up(self) -> None:
        while (
            not self._closed
            and len(self._idle) + self._num_opening_spare < self._spare
            and (
                self._max_busy is None
                or self._num_busy + len(self._idle) + self._num_opening_spare < self._max_busy
            )
        ):
            self._num_opening_spare += 1
            task = asyncio.get_running_loop().create_task(self._open_spare())
            self._spares.add(task)
            task.add_done_callback(self._spares.discard)

    async def _open_spare(self) -> None:
        try:
            conn = await self._open(10.0)
        except UpstreamFailure:
            return  # the send path will connect (and report the error) itself
        finally:
            self._num_opening_spare -= 1
        if self._closed:
            conn.abort()
            return
        conn.idle = True
        self._idle.appendleft(conn)  # behind the warm ones: LIFO reuse stays LIFO

    def _free_one(self) -> None:
        self._num_busy -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def release(self, conn: PooledConnection) -> None:
        """A connection whose response ended and that stays open: idle again."""
        if conn.idle:
            return
        conn.idle = True
        self._free_one()
        if len(self._idle) < self._max_idle and not self._closed:
            self._idle.append(conn)
        else:
            conn.abort()

    def forget(self, conn: PooledConnection) -> None:
        """A connection that closed."""
        self._all.discard(conn)
        if conn.idle:
            with contextlib.suppress(ValueError):
                self._idle.remove(conn)
        else:
            conn.idle = True  # counted free once
            self._free_one()

    @property
    def num_open(self) -> int:
        return len(self._all)

    @property
    def num_idle(self) -> int:
        return len(self._idle)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._spares):
            task.cancel()
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
