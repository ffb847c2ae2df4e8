"""A keep-alive HTTP/1.1 connection to a backend: a raw asyncio protocol that parses
responses with httptools and hands their pieces to the current exchange."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, cast

import httptools

from kvroute.http.client.base import FailureKind, UpstreamFailure

if TYPE_CHECKING:
    from kvroute.http.client.exchange import PooledExchange
    from kvroute.http.client.pool import PooledTransport


class PooledConnection(asyncio.Protocol):
    def __init__(self, pool: PooledTransport) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self.exchange: PooledExchange | None = None
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
