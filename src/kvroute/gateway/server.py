"""The HTTP/1.1 server: asyncio protocol + httptools' C parser, nothing else.

Why not uvicorn or aiohttp: a gateway's whole job is the few hundred microseconds it
adds, and every layer between the socket and the handler costs there
(bench/gateway_overhead.py measures it). This server keeps one task per request,
writes streamed pieces the moment they come (chunked encoding, no buffering, with
back-pressure from the socket), and cancels a request's task the moment its client
goes away, so the upstream request is cancelled too.

Shutdown drains with the listener open (:meth:`HttpServer.shutdown`): probes and load
balancers keep getting answers while streams in progress finish.

Limits enforced here, before a handler runs: the body size (413 as soon as
``Content-Length`` or the received bytes pass it) and malformed HTTP (400).
Keep-alive follows HTTP/1.1; pipelined requests are answered in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

from kvroute.errors import UsageError
from kvroute.gateway.errors import error_payload
from kvroute.gateway.response_head import response_head
from kvroute.gateway.types import Handler, Request, RequestContext, Response


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_head_bytes: int = 64 * 1024
    keep_alive_s: float = 75.0


class _Connection(asyncio.Protocol):
    """One client connection. Parser callbacks build requests; ``_serve`` answers them
    one at a time; ``connection_lost`` cancels the one in progress."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_bytes = 0
        self._body = bytearray()
        self._received_s = 0.0
        self._pending: deque[tuple[Request, bool]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._closed = False
        self._rejected = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self.client = ""

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        self._server.connections.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        # After a 413 the rest of the body is still read (and dropped): closing with
        # unread bytes would reset the connection before the client reads the answer.
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, "protocol upgrades are not supported")
            self._close()
        except httptools.HttpParserError as exc:
            self._reject(400, f"malformed HTTP request: {exc}")
            self._close()

    def eof_received(self) -> bool | None:
        # A client that half-closes is gone for our purposes: cancel its request.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server.connections.discard(self)
        self._cancel_idle_timer()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # -- httptools callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._head_bytes = 0
        self._body = bytearray()
        self._received_s = 0.0
        self._cancel_idle_timer()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self._server.limits.max_head_bytes:
            self._reject(400, "request head too large")
            self._close()
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        self._received_s = time.monotonic()
        length = self._headers.get("content-length")
        limit = self._server.limits.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            self._reject(413, f"request body is larger than {limit} bytes")
            return
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._rejected:
            return
        self._body += body
        limit = self._server.limits.max_body_bytes
        if len(self._body) > limit:
            self._reject(413, f"request body is larger than {limit} bytes")

    def on_message_complete(self) -> None:
        if self._rejected:
            self._close()
            return
        url = httptools.parse_url(self._url)
        path = url.path.decode("latin-1")
        query = url.query.decode("latin-1") if url.query else ""
        request_id = self._headers.get("x-request-id") or self._server.next_request_id()
        if len(request_id) > 128:
            request_id = request_id[:128]
        request = Request(
            method=self._parser.get_method().decode("latin-1"),
            path=path,
            query=query,
            headers=self._headers,
            body=bytes(self._body),
            client=self.client,
            received_s=self._received_s or time.monotonic(),
            ctx=RequestContext(request_id=request_id),
        )
        self._pending.append((request, self._parser.should_keep_alive()))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve())

    # -- answering ----------------------------------------------------------------------

    async def _serve(self) -> None:
        try:
            while self._pending and not self._closed:
                request, keep_alive = self._pending.popleft()
                keep_alive = keep_alive and not self._server.draining
                await self._answer(request, keep_alive)
                if not keep_alive:
                    self._close()
                    return
        except asyncio.CancelledError:
            pass
        finally:
            self._task = None
        if not self._closed:
            if self._server.draining:
                self._close()
            else:
                self._arm_idle_timer()

    async def _answer(self, request: Request, keep_alive: bool) -> None:
        self._server.num_active += 1
        response: Response | None = None
        try:
            response = await self._server.handler(request)
            self._write_head(request, response, keep_alive)
            if response.stream is not None and not self._closed:
                await response.stream.send_to(self)
                if not self._closed and self._transport is not None:
                    self._transport.write(b"0\r\n\r\n")
        finally:
            self._server.num_active -= 1
            if response is not None:
                response.close()
            self._server.notify_idle()

    def _write_head(self, request: Request, response: Response, keep_alive: bool) -> None:
        if self._transport is None or self._closed:
            return
        headers = list(response.headers)
        headers.append(("x-request-id", request.ctx.request_id))
        if not keep_alive:
            headers.append(("connection", "close"))
        if response.stream is None:
            extra = b"content-length: %d\r\n\r\n" % len(response.body)
            self._transport.write(response_head(response.status, headers, extra) + response.body)
        else:
            self._transport.write(
                response_head(response.status, headers, b"transfer-encoding: chunked\r\n\r\n")
            )

    # -- BodySink (streamed bodies push into the connection) ----------------------------

    def write(self, data: bytes) -> None:
        if data and not self._closed and self._transport is not None:
            self._transport.write(b"%x\r\n%s\r\n" % (len(data), data))

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def paused(self) -> bool:
        return self._writable is not None and not self._writable.done()

    def when_writable(self, callback: Callable[[], None]) -> None:
        if self._writable is None or self._writable.done():
            callback()
        else:
            self._writable.add_done_callback(lambda _: callback())

    async def drain(self) -> None:
        if self._writable is not None and not self._writable.done():
            await self._writable

    def _reject(self, status: int, message: str) -> None:
        """Answer a request that never reaches a handler, then close."""
        if self._rejected:
            return
        self._rejected = True
        error_type = "invalid_request_error"
        body = error_payload(
            message, error_type, None, "request_too_large" if status == 413 else None
        )
        self._server.on_rejected(status)
        if self._transport is not None and not self._closed and self._task is None:
            headers = [("content-type", "application/json"), ("connection", "close")]
            extra = b"content-length: %d\r\n\r\n" % len(body)
            self._transport.write(response_head(status, headers, extra) + body)
            # Closed when the dropped body has been read (on_message_complete), or soon.
            asyncio.get_running_loop().call_later(2.0, self._close)
        else:
            self._close()

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def close_if_idle(self) -> None:
        if self._task is None and not self._pending:
            self._close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _arm_idle_timer(self) -> None:
        self._cancel_idle_timer()
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(self._server.limits.keep_alive_s, self.close_if_idle)

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


class HttpServer:
    """Serves ``handler`` on a listening socket. ``num_active`` counts requests being
    answered (streams included); :meth:`shutdown` drains them."""

    def __init__(
        self,
        handler: Handler,
        limits: ServerLimits | None = None,
        on_rejected: Callable[[int], None] | None = None,
    ) -> None:
        self.handler = handler
        self.limits = limits or ServerLimits()
        self.connections: set[_Connection] = set()
        self.num_active = 0
        self.draining = False
        self.drain_started_s: float | None = None
        """When :meth:`shutdown` began (``time.monotonic``); requests received since
        then are new work the gateway refuses with 503 while it drains."""
        self._server: asyncio.Server | None = None
        self._id_prefix = uuid.uuid4().hex[:12]
        self._num_requests = 0
        self._idle = asyncio.Event()
        """Set when the last request in progress ends (cleared when the drain starts)."""
        self._cut = asyncio.Event()
        """Set by :meth:`end_drain`: stop waiting now."""
        self._on_rejected = on_rejected

    def next_request_id(self) -> str:
        """A process-unique id: a random prefix per server and a counter."""
        self._num_requests += 1
        return f"{self._id_prefix}-{self._num_requests}"

    def on_rejected(self, status: int) -> None:
        if self._on_rejected is not None:
            self._on_rejected(status)

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Connection(self), host, port, reuse_address=True, backlog=2048
            )
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                hint="pick another port with --port (0: any free port)",
            ) from None

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def notify_idle(self) -> None:
        if self.num_active == 0:
            self._idle.set()

    async def shutdown(self, drain_timeout_s: float, grace_s: float = 0.0) -> int:
        """Drain, then close. Returns how many requests were cut.

        The listener stays open for at least ``grace_s`` (so load balancers see /ready
        turn 503 even when nothing is in progress) and while requests in progress
        (streams too) finish, for up to ``max(grace_s, drain_timeout_s)`` in all: load
        balancers and probes still get answers (the handler sees :attr:`draining`:
        /ready says 503, new completions 503), every answer closes its connection, and
        idle keep-alive connections are closed now. Then the listener closes and
        whatever is still running is cut. :meth:`end_drain` ends the wait early.
        """
        self.draining = True
        started = self.drain_started_s = time.monotonic()
        self._idle.clear()
        for conn in list(self.connections):
            conn.close_if_idle()
        if grace_s > 0:
            await _until(self._cut, grace_s)
        left_s = drain_timeout_s - (time.monotonic() - started)
        if self.num_active and not self._cut.is_set() and left_s > 0:
            await _until(self._idle, left_s)
        if self._server is not None:
            self._server.close()
        cut = self.num_active
        for conn in list(self.connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
        return cut

    def arrived_while_draining(self, request: Request) -> bool:
        """Whether ``request`` came after :meth:`shutdown` began (new work to refuse)."""
        return self.drain_started_s is not None and request.received_s >= self.drain_started_s

    def end_drain(self) -> None:
        """Stop waiting (the grace, requests in progress): :meth:`shutdown` cuts now."""
        self._cut.set()
        self._idle.set()


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Until ``event`` is set or ``timeout_s`` has passed."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
