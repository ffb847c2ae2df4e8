"""Idle keep-alive connections to one endpoint, reused last-in first-out, with a bound
on how many are in use and optional spares opened ahead of need."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections import deque

from kvroute.bench.http1 import Clock, Connection, Target


class ConnectionPool:
    """Idle keep-alive connections to one target, at most ``max_connections`` in use.

    Idle connections are reused last-in first-out, so a light load keeps few of them
    warm (llama-server holds an HTTP thread per open connection).
    """

    def __init__(
        self, target: Target, clock: Clock, *, max_connections: int = 1024, spare: int = 0
    ) -> None:
        self.target = target
        self._clock = clock
        self._idle: deque[Connection] = deque()
        self._max = max_connections
        self._spare = spare
        self._num_out = 0
        self._num_connecting = 0
        self._opening: set[asyncio.Task[None]] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ssl = ssl_module.create_default_context() if target.tls else None
        self._closed = False
        self.num_opened = 0

    def acquire_idle(self) -> Connection | None:
        """An idle connection right now, without waiting (None when there is none):
        the dispatcher's fast path, which sends in the same loop step it woke in.

        With ``spare`` > 0, taking a connection starts opening new ones in the
        background until ``spare`` are idle or on their way, so a rise in concurrency
        finds a connection ready instead of connecting on the send path.
        """
        found = None
        while self._idle and self._num_out < self._max:
            conn = self._idle.pop()
            if not conn.closed:
                self._num_out += 1
                found = conn
                break
        if self._spare:
            self._top_up()
        return found

    def _top_up(self) -> None:
        while (
            not self._closed
            and len(self._idle) + self._num_connecting < self._spare
            and self._num_out + len(self._idle) + self._num_connecting < self._max
        ):
            self._num_connecting += 1
            task = asyncio.get_running_loop().create_task(self._open_spare())
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open_spare(self) -> None:
        try:
            _, conn = await asyncio.get_running_loop().create_connection(
                lambda: Connection(self._clock), self.target.host, self.target.port, ssl=self._ssl
            )
        except OSError:
            return  # the send path will connect (and report the error) itself
        finally:
            self._num_connecting -= 1
        if self._closed:
            conn.abort()
            return
        self.num_opened += 1
        self._idle.appendleft(conn)  # behind the warm ones: LIFO reuse stays LIFO

    async def acquire(self) -> Connection:
        """An idle connection or a new one. Raises ``OSError`` when connecting fails."""
        while self._num_out >= self._max:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        conn = self.acquire_idle()
        if conn is not None:
            return conn
        self._num_out += 1
        try:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(
                lambda: Connection(self._clock), self.target.host, self.target.port, ssl=self._ssl
            )
        except BaseException:
            self._give_back()
            raise
        self.num_opened += 1
        return conn

    def _give_back(self) -> None:
        self._num_out -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def release(self, conn: Connection) -> None:
        """Give back a connection after its response; closed unless reusable."""
        if conn.reusable:
            conn.recycle()
            self._idle.append(conn)
        else:
            conn.abort()
        self._give_back()

    async def prewarm(self, num: int) -> int:
        """Open up to ``num`` idle connections ahead of a run; returns how many opened."""
        conns = []
        for _ in range(num):
            try:
                conns.append(await self.acquire())
            except OSError:
                break
        for conn in conns:
            self._idle.append(conn)
            self._give_back()
        return len(conns)

    def close(self) -> None:
        self._closed = True
        for task in list(self._opening):
            task.cancel()
        while self._idle:
            self._idle.pop().abort()
