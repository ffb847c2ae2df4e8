"""The data plane's HTTP/1.1 server: asyncio protocol + httptools' C parser, nothing else.

Why our own: a gateway's whole job is the few hundred microseconds it adds, and every
layer between the socket and the handler costs there (bench/gateway_overhead.py
measures it). bench/gateway_servers.py compares it with well-kept servers side by side;
the gateway-perimeter issue kept this one over granian (its limits and drain are the
gateway's own; see bench/RESULTS.md). This server keeps one task per request,
writes streamed pieces the moment they come (chunked encoding, no buffering, with
back-pressure from the socket), and cancels a request's task the moment its client
goes away, so the upstream request is cancelled too.

Shutdown drains with the listener open (:meth:`HttpServer.shutdown`): probes and load
balancers keep getting answers while streams in progress finish.

Limits enforced here, before a handler runs (:class:`ServerLimits`): the body size
(413 as soon as ``Content-Length`` or the received bytes pass it); the head's size
(414/431 as soon as it passes, however it is split); the time a head or a body may
take to arrive (408: slow clients cannot hold connections); the number of open
connections (the longest-waiting idle one is closed to make room, with a warning);
how many pipelined requests are read ahead (then reading pauses) and how fast they
are answered (``pipelined_per_s`` a connection); malformed HTTP,
a missing or repeated Host, a transfer coding other than chunked (400/501).
Keep-alive follows HTTP/1.1 (HTTP/1.0: only when asked, and said so; streams to
1.0 clients are unframed, ended by the close); pipelined requests are answered in
order, an error found among them after the answers before it. HEAD gets the head
only. ``Upgrade`` (h2c, websocket) is ignored: the request is answered over HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, cast

import httptools

from kvroute.errors import UsageError
from kvroute.http.messages import (
    C,
    Handler,
    HttpRequest,
    Response,
    error_payload,
    sse_error_event,
)
from kvroute.http.response_head import response_head


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_head_bytes: int = 64 * 1024
    """Request line and headers together: 414 (line) or 431 (headers) past it."""
    keep_alive_s: float = 75.0
    head_timeout_s: float = 10.0
    """From the connection (or a request's first byte) to the end of its head: 408."""
    body_timeout_s: float = 60.0
    """From the end of a head to the end of its body: 408."""
    max_connections: int = 4096
    """Past it the longest-waiting connection with nothing in progress is closed (or,
    with every one busy, the new one gets a 503)."""
    max_pipelined: int = 4
    """Requests read ahead of the one being answered; then reading pauses (TCP's
    back-pressure holds the rest in the client)."""
    pipelined_per_s: float = 20.0
    """Pipelined requests (sent before the answer to the one before was complete)
    answered per second and connection, after a burst of ``max_pipelined``. No
    client in use pipelines (browsers, SDKs and proxies wait for each answer), and a
    server cannot tell whether pipelined answers are read before the socket buffers
    fill (megabytes); unpaced, one connection that never reads makes the gateway
    answer tens of thousands of cheap requests at full speed."""


_CAP_LOG_EVERY_S = 10.0
"""The connection-cap warning is logged at most this often (with a running count)."""
_LINGER_S = 2.0
"""After a last answer, unread bytes still arriving are discarded this long before the
close (closing with unread bytes resets the connection, losing the answer)."""


class _Connection(asyncio.Protocol):
    """One client connection. Parser callbacks build requests; ``_serve`` answers them
    one at a time; ``connection_lost`` cancels the one in progress.

    Read timers: the head must be complete ``head_timeout_s`` after the connection or
    the request's first byte, the body ``body_timeout_s`` after the head; between
    requests the connection may idle ``keep_alive_s``. An error found while earlier
    answers are in progress (a malformed pipelined request, a timeout) is answered
    after them, then the connection closes.
    """

    def __init__(self, server: HttpServer[Any]) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = bytearray()
        self._headers: dict[str, str] = {}
        self._head_bytes = 0
        self._head_problem: tuple[int, str] | None = None
        self._body = bytearray()
        self._received_s = 0.0
        self._pending: deque[tuple[HttpRequest[Any], bool, bool]] = deque()
        """(request, keep-alive, HTTP/1.0) in arrival order."""
        self._task: asyncio.Task[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._closed = False
        self._rejected = False
        self._read_done = False
        """No more requests are read (after a close, an upgrade or an error)."""
        self._rejection: bytes | None = None
        """An error answer waiting for the answers before it."""
        self._reading_paused = False
        self._in_message = False
        self._in_body = False
        self._continue_due = False
        self._chunked = True
        self._current: HttpRequest[Any] | None = None
        self._streaming_sse = False
        self._timer: asyncio.TimerHandle | None = None
        self._pipelined_due_s = 0.0
        """When the next pipelined answer may begin (see ServerLimits.pipelined_per_s)."""
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
        if not self._server.admit(self):
            self._closed = True
            body = error_payload("too many connections; retry", "server_error", None, "overloaded")
            headers = [("content-type", "application/json"), ("connection", "close")]
            self._transport.write(
                response_head(503, headers, b"content-length: %d\r\n\r\n" % len(body)) + body
            )
            self._transport.close()
            return
        self._arm(self._server.limits.head_timeout_s, self._read_timeout)

    def data_received(self, data: bytes) -> None:
        if self._read_done:
            return  # after the last request: dropped (see _LINGER_S)
        # After a 413 the rest of the body is still read (and dropped): closing with
        # unread bytes would reset the connection before the client reads the answer.
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # h2c or websocket: the request is answered over HTTP/1.1, Upgrade ignored
            # (RFC 9110 7.8); what follows it is another protocol, so nothing more is read.
            self._read_done = True
            if self._pending:
                request, _, http10 = self._pending[-1]
                self._pending[-1] = (request, False, http10)
        except httptools.HttpParserError as exc:
            if not self._read_done:  # bytes after a Connection: close request: dropped
                self._reject(400, f"malformed HTTP request: {exc}", "bad_request")

    def eof_received(self) -> bool | None:
        # A client that half-closes is gone for our purposes: cancel its request (a
        # client that left sends the same FIN; only this lets its generation stop).
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server.connections.pop(self, None)
        self._cancel_timer()
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
        self._url = bytearray()
        self._headers = {}
        self._head_bytes = 0
        self._head_problem = None
        self._body = bytearray()
        self._received_s = 0.0
        self._in_message, self._in_body = True, False
        self._arm(self._server.limits.head_timeout_s, self._read_timeout)

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self._server.limits.max_head_bytes:
            self._reject(414, "request line too long", "head_too_large")
            return
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self._server.limits.max_head_bytes:
            self._reject(431, "request head too large", "head_too_large")
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == "host" and key in self._headers:
            self._head_problem = (400, "more than one Host header")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        if self._rejected:
            return
        self._received_s = time.monotonic()
        self._in_body = True
        self._arm(self._server.limits.body_timeout_s, self._read_timeout)
        headers = self._headers
        problem = self._head_problem
        if problem is None and "host" not in headers and self._parser.get_http_version() != "1.0":
            problem = (400, "an HTTP/1.1 request needs a Host header")
        te = headers.get("transfer-encoding")
        if problem is None and te is not None and te.strip().lower() != "chunked":
            problem = (501, f"transfer-encoding {te!r} is not supported (only chunked)")
        if problem is not None:
            self._reject(problem[0], problem[1], "bad_request")
            return
        length = headers.get("content-length")
        limit = self._server.limits.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            self._reject(413, f"request body is larger than {limit} bytes", "body_too_large")
            return
        if headers.get("expect", "").lower() == "100-continue":
            # Never inside an answer in progress: after it (see _serve).
            if self._task is None and not self._pending and self._transport is not None:
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            else:
                self._continue_due = True

    def on_body(self, body: bytes) -> None:
        if self._rejected:
            return
        self._body += body
        limit = self._server.limits.max_body_bytes
        if len(self._body) > limit:
            self._reject(413, f"request body is larger than {limit} bytes", "body_too_large")

    def on_message_complete(self) -> None:
        self._in_message = self._in_body = self._continue_due = False
        self._cancel_timer()
        if self._rejected:
            if self._rejection is None:
                self._close()
            return
        url = httptools.parse_url(bytes(self._url))
        path = url.path.decode("latin-1")
        query = url.query.decode("latin-1") if url.query else ""
        request_id = self._headers.get("x-request-id") or self._server.next_request_id()
        if len(request_id) > 128:
            request_id = request_id[:128]
        request = HttpRequest(
            method=self._parser.get_method().decode("latin-1"),
            path=path,
            query=query,
            headers=self._headers,
            body=bytes(self._body),
            client=self.client,
            received_s=self._received_s or time.monotonic(),
            request_id=request_id,
            ctx=self._server.new_context(request_id),
        )
        keep_alive = self._parser.should_keep_alive()
        self._pending.append((request, keep_alive, self._parser.get_http_version() == "1.0"))
        if not keep_alive:
            self._read_done = True  # what follows a Connection: close request is dropped
        elif len(self._pending) >= self._server.limits.max_pipelined:
            self._pause_reading()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve())

    # -- answering ----------------------------------------------------------------------

    async def _serve(self) -> None:
        try:
            while self._pending and not self._closed:
                request, keep_alive, http10 = self._pending.popleft()
                if self._reading_paused and len(self._pending) < self._server.limits.max_pipelined:
                    self._resume_reading()
                keep_alive = keep_alive and not self._server.draining
                await self._answer(request, keep_alive, http10)
                if not keep_alive:
                    self._linger()
                    return
                # A client that does not read its answers gets no more of them (and,
                # with the pipelining pause, no more of its requests are read); one
                # that reads nothing for keep_alive_s is closed: else it would hold a
                # connection (busy, so never evicted at the cap) for good.
                # (No await unless paused: a request that arrives while this task
                # runs counts as pipelined.)
                if self.paused:
                    try:
                        await asyncio.wait_for(self.drain(), self._server.limits.keep_alive_s)
                    except TimeoutError:
                        self.abort()
                        return
                if self._pending:
                    # The next one was sent before this answer was done: pipelined.
                    # Paced, and one answer per turn of the loop at most, so a
                    # pipelining client neither holds the loop nor its CPU.
                    await asyncio.sleep(self._pipelined_wait_s())
        except asyncio.CancelledError:
            pass
        finally:
            self._task = None
        if self._closed:
            return
        if self._rejection is not None and self._transport is not None:
            self._transport.write(self._rejection)
            self._rejection = None
            self._linger()
        elif self._read_done or self._server.draining:
            self._linger()
        elif self._continue_due and self._transport is not None:
            self._continue_due = False
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        elif not self._in_message:
            self._arm(self._server.limits.keep_alive_s, self.close_if_idle)

    async def _answer(self, request: HttpRequest[Any], keep_alive: bool, http10: bool) -> None:
        self._server.num_active += 1
        self._current = request
        response: Response | None = None
        try:
            response = await self._server.handler(request)
            self._streaming_sse = response.stream is not None and any(
                n == "content-type" and v.startswith("text/event-stream")
                for n, v in response.headers
            )
            # HTTP/1.0 has no chunked framing: a stream's end is the connection's end.
            self._chunked = not http10
            keep_alive = keep_alive and not (http10 and response.stream is not None)
            self._write_head(request, response, keep_alive, http10)
            if request.method == "HEAD":
                return  # the head only, whatever the handler produced
            if response.stream is not None and not self._closed:
                await response.stream.send_to(self)
                if self._chunked and not self._closed and self._transport is not None:
                    self._transport.write(b"0\r\n\r\n")
        finally:
            self._server.num_active -= 1
            self._current, self._streaming_sse = None, False
            if response is not None:
                response.close()
            self._server.notify_idle()

    def _pipelined_wait_s(self) -> float:
        """How long the next pipelined answer waits: ``pipelined_per_s``, with a burst
        of ``max_pipelined`` (a virtual schedule: each answer books the next slot)."""
        limits = self._server.limits
        interval_s = 1.0 / limits.pipelined_per_s
        now = time.monotonic()
        due = max(self._pipelined_due_s, now - (limits.max_pipelined - 1) * interval_s)
        self._pipelined_due_s = due + interval_s
        return max(0.0, due - now)

    def cut(self) -> str | None:
        """Shut down now: an SSE stream in progress ends with a terminal error event
        (clients see why it is incomplete), anything else is dropped. Returns the id
        of the request that was cut, if one was in progress."""
        cut = self._current.request_id if self._current is not None else None
        transport = self._transport
        if self._streaming_sse and transport is not None and not self._closed:
            event = sse_error_event(
                "the gateway shut down before the answer was complete", "server_error", "draining"
            )
            self.write(event)
            if self._chunked:
                transport.write(b"0\r\n\r\n")
            transport.close()  # after the buffered bytes; a client that reads nothing:
            asyncio.get_running_loop().call_later(_LINGER_S, transport.abort)
        else:
            self.abort()
        return cut

    def _write_head(
        self, request: HttpRequest[Any], response: Response, keep_alive: bool, http10: bool
    ) -> None:
        if self._transport is None or self._closed:
            return
        headers = list(response.headers)
        headers.append(("x-request-id", request.request_id))
        if not keep_alive:
            headers.append(("connection", "close"))
        elif http10:
            headers.append(("connection", "keep-alive"))  # 1.0 closes unless told
        head_only = request.method == "HEAD"
        if response.stream is None:
            extra = b"content-length: %d\r\n\r\n" % len(response.body)
            body = b"" if head_only else response.body
            self._transport.write(response_head(response.status, headers, extra) + body)
        else:
            framing = b"transfer-encoding: chunked\r\n\r\n" if self._chunked else b"\r\n"
            self._transport.write(response_head(response.status, headers, framing))

    # -- BodySink (streamed bodies push into the connection) ----------------------------

    def write(self, data: bytes) -> None:
        if data and not self._closed and self._transport is not None:
            if self._chunked:
                self._transport.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                self._transport.write(data)

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

    # -- errors, timers, closing --------------------------------------------------------

    def _reject(self, status: int, message: str, kind: str) -> None:
        """Answer a request that never reaches a handler, after the answers before it;
        then close. A 413 keeps reading (and dropping) the body it refused, so the
        client is still reading when the answer comes; anything else reads no more."""
        if self._rejected:
            return
        self._rejected = True
        self._server.on_rejected(status, kind)
        body = error_payload(
            message, "invalid_request_error", None, "request_too_large" if status == 413 else None
        )
        headers = [("content-type", "application/json"), ("connection", "close")]
        answer = response_head(status, headers, b"content-length: %d\r\n\r\n" % len(body)) + body
        if status != 413:
            self._read_done = True
        if self._task is not None or self._pending:
            self._read_done = True
            self._rejection = answer
            return
        if self._transport is not None and not self._closed:
            self._transport.write(answer)
            if status == 413:
                # Closed when the dropped body has been read (on_message_complete), or soon.
                self._arm(_LINGER_S, self._close)
            else:
                self._linger()

    def _read_timeout(self) -> None:
        self._timer = None
        if self._read_done and not self._rejected:
            return  # no more requests are read: nothing is late
        what = "body" if self._in_body else "head"
        limit = (
            self._server.limits.body_timeout_s
            if self._in_body
            else self._server.limits.head_timeout_s
        )
        if (
            not self._in_message
            and self._head_bytes == 0
            and not self._pending
            and self._task is None
        ):
            self._close()  # a connection that never sent a byte: nothing to answer
            return
        self._reject(408, f"request {what} not received within {limit:g} s", f"{what}_timeout")

    def _linger(self) -> None:
        """Close after the last answer: our side now, theirs once they close or after
        :data:`_LINGER_S`, dropping what still arrives meanwhile."""
        self._read_done = True
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._resume_reading()
        if transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                transport.write_eof()
            self._arm(_LINGER_S, self._close)
        else:
            self._close()

    def _pause_reading(self) -> None:
        if self._transport is not None and not self._reading_paused:
            self._reading_paused = True
            self._cancel_timer()  # a client we do not read cannot be late
            with contextlib.suppress(RuntimeError):
                self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._transport is not None and self._reading_paused:
            self._reading_paused = False
            with contextlib.suppress(RuntimeError):
                self._transport.resume_reading()
            if self._in_message and not self._read_done:
                limits = self._server.limits
                self._arm(
                    limits.body_timeout_s if self._in_body else limits.head_timeout_s,
                    self._read_timeout,
                )

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    @property
    def busy(self) -> bool:
        """Answering, or holding requests to answer."""
        return self._task is not None or bool(self._pending)

    def close_if_idle(self) -> None:
        if not self.busy:
            self._close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _arm(self, delay_s: float, callback: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(delay_s, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class HttpServer(Generic[C]):
    """Serves ``handler`` on a listening socket. ``num_active`` counts requests being
    answered (streams included); :meth:`shutdown` drains them. Each request carries
    ``new_context(request_id)`` as its ``ctx``."""

    def __init__(
        self,
        handler: Handler[C],
        new_context: Callable[[str], C],
        limits: ServerLimits | None = None,
        on_rejected: Callable[[int, str], None] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.handler = handler
        self.new_context = new_context
        self.limits = limits or ServerLimits()
        self.logger = logger or logging.getLogger("kvroute.http")
        self.connections: dict[_Connection, None] = {}
        """Open connections, oldest first (the order eviction looks in)."""
        self.num_evicted = 0
        self._cap_logged_s = -_CAP_LOG_EVERY_S
        self._num_evicted_logged = 0
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

    def on_rejected(self, status: int, kind: str) -> None:
        if self._on_rejected is not None:
            self._on_rejected(status, kind)

    def admit(self, conn: _Connection) -> bool:
        """Take ``conn`` in; at ``max_connections`` make room by closing the oldest
        connection with nothing in progress (a slow or idle one: whoever holds many
        connections open loses them first); False when every one is busy."""
        if len(self.connections) >= self.limits.max_connections:
            victim = next((c for c in self.connections if not c.busy), None)
            now = time.monotonic()
            if victim is not None:
                self.connections.pop(victim, None)
                victim.abort()
                self.num_evicted += 1
            if now - self._cap_logged_s >= _CAP_LOG_EVERY_S:
                self._cap_logged_s = now
                self.logger.warning(
                    "connection cap reached: %d open (listener.max_connections); %s "
                    "(%d closed to make room so far)",
                    len(self.connections) + (victim is not None),
                    "closing the longest-waiting idle one"
                    if victim is not None
                    else "every one is busy, refusing new ones with 503",
                    self.num_evicted,
                )
            if victim is None:
                self.on_rejected(503, "connection_cap")
                return False
        self.connections[conn] = None
        return True

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
        cut_ids = [rid for conn in list(self.connections) if (rid := conn.cut()) is not None]
        if cut_ids:
            self.logger.warning(
                "drain over: cut %d requests in progress (%s)", len(cut_ids), ", ".join(cut_ids)
            )
        if self._server is not None:
            await self._server.wait_closed()
        return cut

    def arrived_while_draining(self, request: HttpRequest[Any]) -> bool:
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
