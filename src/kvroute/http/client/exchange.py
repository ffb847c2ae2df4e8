"""One request in flight on a pooled connection: the response head, then the body.

Received body pieces are queued in the protocol callback and handed out batched
(everything that arrived since the last read), so a busy stream costs one wake-up per
read, not per piece. The queue is bounded: past ``_HIGH_WATER`` bytes the socket stops
being read (back-pressure reaches the engine), and it resumes once the reader catches up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvroute.http.client.base import FailureKind, UpstreamFailure

if TYPE_CHECKING:
    from kvroute.http.client.connection import PooledConnection

_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024


class PooledExchange:
    __slots__ = (
        "_buf",
        "_conn",
        "_done",
        "_error",
        "_head",
        "_last_data_s",
        "_num_buffered",
        "_on_data",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(self, conn: PooledConnection) -> None:
        self._conn = conn
        self._head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buf: deque[bytes] = deque()
        self._num_buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._on_data: Callable[[bytes], None] | None = None
        self._done = False
        self._error: UpstreamFailure | None = None
        self._last_data_s = 0.0
        self.status = 0
        self.headers: dict[str, str] = {}

    @property
    def response_started(self) -> bool:
        """Whether any byte of the response has arrived."""
        return self._conn.response_started

    # ResponseReceiver: called by the connection
    def on_head(self, status: int, headers: dict[str, str], t: float) -> None:
        self.status = status
        self.headers = headers
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, data: bytes, t: float) -> None:
        if self._on_data is not None:
            self._last_data_s = asyncio.get_running_loop().time()
            self._on_data(data)
            return
        self._buf.append(data)
        self._num_buffered += len(data)
        if self._num_buffered > _HIGH_WATER:
            self._conn.pause_reading()
        self._wake()

    def on_end(self, t: float) -> None:
        self._done = True
        self._on_data = None  # no more data; and no reference cycle left for the GC
        self._wake()

    def on_failure(self, failure: UpstreamFailure, t: float) -> None:
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
        self.on_failure(
            UpstreamFailure(kind, what, response_started=self.response_started), self._conn.now()
        )
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

    async def finished(self, timeout_s: float, idle_s: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + timeout_s
        if idle_s is None:
            while self._error is None and not self._done:
                await self._wait(
                    deadline_s, "the response did not end in time", FailureKind.TOTAL_TIMEOUT
                )
        else:
            # Pieces go straight to the attached callback (no wake-up each), so a timer
            # checks how long ago the last one came and re-arms for the rest.
            self._last_data_s = loop.time()
            while self._error is None and not self._done:
                self._waiter = loop.create_future()
                check_s = min(deadline_s, self._last_data_s + idle_s)
                timer = loop.call_at(check_s, self._check_deadlines, deadline_s, idle_s)
                try:
                    await self._waiter
                finally:
                    self._waiter = None
                    timer.cancel()
        if self._error is not None:
            raise self._error

    def _check_deadlines(self, deadline_s: float, idle_s: float) -> None:
        now = asyncio.get_running_loop().time()
        if now >= deadline_s:
            self._on_timeout("the response did not end in time", FailureKind.TOTAL_TIMEOUT)
        elif now - self._last_data_s >= idle_s:
            self._on_timeout(f"no data for {idle_s:g} s", FailureKind.IDLE_TIMEOUT)
        else:
            self._wake()  # data came meanwhile: wait again from its time

    def pause(self) -> None:
        self._conn.pause_reading()

    def resume(self) -> None:
        self._conn.resume_reading()

    def abort(self) -> None:
        if not self._done:
            self._conn.abort()
