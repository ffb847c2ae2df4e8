"""A keep-alive HTTP/1.1 connection to a backend: a raw asyncio protocol that parses
responses with httptools and hands their pieces to the current request's receiver,
stamped with the time they came off the socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, cast

import httptools

from kvroute.http.client.base import FailureKind, ResponseReceiver, UpstreamFailure

if TYPE_CHECKING:
    from kvroute.http.client.pool import PooledTransport


class PooledConnection(asyncio.Protocol):
    """One connection of a :class:`~kvroute.http.client.pool.PooledTransport`.

    ``receiver`` is the response in progress (None while idle); ``num_requests`` counts
    the requests it has carried, so a caller can tell a reused connection from a new one.
    """

    def __init__(self, pool: PooledTransport) -> None:
        self._pool = pool
        self._clock = pool.clock
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self.receiver: ResponseReceiver | None = None
        self.response_started = False
        self.num_requests = 0
        self.closed = False
        self._aborted = False
        self.idle = False
        self._keep_alive = True
        self._until_close = False
        self._t = 0.0

    def send(self, data: bytes, receiver: ResponseReceiver) -> None:
        """Write one request; its response goes to ``receiver``."""
        assert self.transport is not None and self.receiver is None
        self.receiver = receiver
        self.response_started = False
        self.num_requests += 1
        self.transport.write(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.receiver is None:  # bytes on an idle connection: it is unusable
            self.abort()
            return
        self._t = self._clock()
        self.response_started = True
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
        self._t = self._clock()
        if exc is None and self._until_close and not self._aborted and self.receiver is not None:
            # A body framed by the connection's end (no length, not chunked): complete.
            receiver, self.receiver = self.receiver, None
            receiver.on_end(self._t)
            return
        detail = repr(exc) if exc else "connection closed by the backend"
        self._fail(FailureKind.RESET, detail)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()
        status = self._parser.get_status_code()
        headers = self._headers
        self._until_close = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "")
            and status not in (204, 304)
        )
        if self.receiver is not None:
            self.receiver.on_head(status, headers, self._t)

    def on_body(self, body: bytes) -> None:
        if self.receiver is not None:
            self.receiver.on_body(body, self._t)

    def on_message_complete(self) -> None:
        receiver, self.receiver = self.receiver, None
        self._until_close = False
        if receiver is not None:
            receiver.on_end(self._t)
        self._parser = httptools.HttpResponseParser(self)
        if self._keep_alive and not self.closed:
            self._pool.release(self)
        else:
            self.abort()

    def _fail(self, kind: FailureKind, detail: str) -> None:
        receiver, self.receiver = self.receiver, None
        if receiver is not None:
            receiver.on_failure(
                UpstreamFailure(kind, detail, response_started=self.response_started), self._t
            )

    def now(self) -> float:
        """The transport's clock, which stamps every piece this connection receives."""
        return self._clock()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()

    def abort(self) -> None:
        """Drop the connection now (the backend sees its client go and stops work)."""
        self.closed = self._aborted = True
        if self.transport is not None:
            self.transport.abort()
