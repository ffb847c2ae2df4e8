"""A minimal HTTP/1.1 client for load generation: keep-alive connections, one request
at a time each, responses parsed incrementally as bytes arrive.

Why not httpx: a benchmark client must cost the server's measurements nothing, and at
a thousand streamed requests a second Python's per-chunk overhead decides whether it
can keep up. Here each received piece is handled in the protocol callback that
receives it (timestamped there), with no task switch per chunk; ``bench/bench_client.py``
measures both (see docs/bench.md).

Framing: ``Transfer-Encoding: chunked`` (what llama-server and uvicorn stream with),
``Content-Length``, or read-until-close. The parser is a pure state machine
(:class:`ResponseParser`) driven by :class:`Connection`; connections are pooled in
:mod:`kvroute.bench.pool`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from kvroute.errors import UsageError

Clock = Callable[[], float]


class Failure(enum.Enum):
    """Why a response could not be read to its end."""

    MALFORMED = "malformed_http"
    RESET = "reset"
    """The connection closed (or was reset) before the response ended."""


class Sink(Protocol):
    """Receives one response as it is parsed; ``t`` is when its bytes arrived."""

    def on_head(self, status: int, headers: dict[bytes, bytes], t: float) -> None: ...

    def on_body(self, data: bytes, t: float) -> None: ...

    def on_end(self, t: float) -> None: ...

    def on_failure(self, failure: Failure, detail: str, t: float) -> None: ...


class _State(enum.Enum):
    HEAD = 0
    CHUNK_SIZE = 1
    CHUNK_DATA = 2
    CHUNK_CRLF = 3
    TRAILER = 4
    LENGTH = 5
    UNTIL_CLOSE = 6
    DONE = 7
    FAILED = 8


_MAX_HEAD_BYTES = 64 * 1024


class ResponseParser:
    """Parses one HTTP/1.1 response from pieces of bytes, calling ``sink`` as it goes.

    After :attr:`done`, :attr:`keep_alive` says whether the connection may carry
    another request, and :attr:`leftover` whether bytes beyond the response arrived
    (which makes the connection unusable).
    """

    __slots__ = ("_buf", "_remaining", "_sink", "_state", "keep_alive", "leftover", "status")

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._buf = bytearray()
        self._state = _State.HEAD
        self._remaining = 0
        self.status = 0
        self.keep_alive = True
        self.leftover = False

    @property
    def done(self) -> bool:
        return self._state in (_State.DONE, _State.FAILED)

    def feed(self, data: bytes, t: float) -> None:
        if self.done:
            self.leftover = self.leftover or bool(data)
            return
        state = self._state
        if state is _State.CHUNK_DATA and not self._buf and len(data) <= self._remaining:
            self._remaining -= len(data)  # fast path: a piece inside one chunk
            if self._remaining == 0:
                self._state = _State.CHUNK_CRLF
            self._sink.on_body(data, t)
            return
        if state is _State.UNTIL_CLOSE:
            self._sink.on_body(data, t)
            return
        self._buf += data
        self._run(t)

    def eof(self, t: float) -> None:
        """The connection closed."""
        if self._state is _State.UNTIL_CLOSE:
            self._state = _State.DONE
            self._sink.on_end(t)
        elif not self.done:
            self._fail(Failure.RESET, "connection closed before the response ended", t)

    def _fail(self, failure: Failure, detail: str, t: float) -> None:
        self._state = _State.FAILED
        self.keep_alive = False
        self._sink.on_failure(failure, detail, t)

    def _run(self, t: float) -> None:
        buf = self._buf
        pos = 0
        sink = self._sink
        while True:
            state = self._state
            if state is _State.HEAD:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if len(buf) - pos > _MAX_HEAD_BYTES:
                        self._fail(Failure.MALFORMED, "response head too large", t)
                    break
                head = bytes(buf[pos:end])
                pos = end + 4
                if not self._head(head, t):
                    break
            elif state is _State.CHUNK_SIZE:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if len(buf) - pos > 1024:
                        self._fail(Failure.MALFORMED, "chunk size line too long", t)
                    break
                line = bytes(buf[pos:end]).split(b";", 1)[0].strip()
                pos = end + 2
                try:
                    size = int(line, 16)
                except ValueError:
                    self._fail(Failure.MALFORMED, f"bad chunk size {line[:20]!r}", t)
                    break
                if size < 0:
                    self._fail(Failure.MALFORMED, "negative chunk size", t)
                    break
                self._remaining = size
                self._state = _State.CHUNK_DATA if size else _State.TRAILER
            elif state is _State.CHUNK_DATA:
                take = min(self._remaining, len(buf) - pos)
                if take == 0:
                    break
                piece = bytes(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _State.CHUNK_CRLF
                sink.on_body(piece, t)
            elif state is _State.CHUNK_CRLF:
                if len(buf) - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    self._fail(Failure.MALFORMED, "chunk not followed by CRLF", t)
                    break
                pos += 2
                self._state = _State.CHUNK_SIZE
            elif state is _State.TRAILER:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                empty = end == pos
                pos = end + 2
                if empty:
                    self._finish(t)
            elif state is _State.LENGTH:
                take = min(self._remaining, len(buf) - pos)
                if take:
                    piece = bytes(buf[pos : pos + take])
                    pos += take
                    self._remaining -= take
                    sink.on_body(piece, t)
                if self._remaining == 0:
                    self._finish(t)
                else:
                    break
            elif state is _State.UNTIL_CLOSE:
                if pos < len(buf):
                    sink.on_body(bytes(buf[pos:]), t)
                    pos = len(buf)
                break
            else:  # DONE or FAILED
                if state is _State.DONE and pos < len(buf):
                    self.leftover = True
                pos = len(buf)
                break
        del buf[:pos]

    def _head(self, head: bytes, t: float) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            self._fail(Failure.MALFORMED, f"bad status line {lines[0][:60]!r}", t)
            return False
        try:
            status = int(parts[1])
        except ValueError:
            self._fail(Failure.MALFORMED, f"bad status code {parts[1][:10]!r}", t)
            return False
        if 100 <= status < 200:
            return True  # an interim response (100 Continue): the real head follows
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                self._fail(Failure.MALFORMED, f"bad header line {line[:60]!r}", t)
                return False
            headers[name.strip().lower()] = value.strip()
        self.status = status
        conn = headers.get(b"connection", b"").lower()
        self.keep_alive = parts[0] == b"HTTP/1.1" and b"close" not in conn
        self._sink.on_head(status, headers, t)
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self._state = _State.CHUNK_SIZE
        elif b"content-length" in headers:
            try:
                self._remaining = int(headers[b"content-length"])
            except ValueError:
                self._fail(Failure.MALFORMED, "bad Content-Length", t)
                return False
            self._state = _State.LENGTH
        else:
            self.keep_alive = False
            self._state = _State.UNTIL_CLOSE
        return True

    def _finish(self, t: float) -> None:
        self._state = _State.DONE
        self._sink.on_end(t)


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: host, port, TLS, the path prefix and the Host header."""

    host: str
    port: int
    tls: bool
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Target:
        """``http://127.0.0.1:8080`` (a trailing ``/v1`` is dropped: paths add it)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"endpoint URL must be http(s)://host[:port], got {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[:-3]
        return cls(parts.hostname, port, parts.scheme == "https", path)

    @property
    def host_header(self) -> str:
        return f"{self.host}:{self.port}"


def request_bytes(target: Target, path: str, body: bytes, *, api_key: str | None = None) -> bytes:
    """A complete ``POST`` with a JSON body, asking for a kept-alive connection."""
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    head = (
        f"POST {target.base_path}{path} HTTP/1.1\r\nHost: {target.host_header}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{auth}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class Connection(asyncio.Protocol):
    """One keep-alive connection; :meth:`send` starts a request whose response goes to a sink."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self._parser: ResponseParser | None = None
        self.closed = False
        self.num_requests = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def send(self, data: bytes, sink: Sink) -> None:
        assert self._transport is not None and self._parser is None
        self._parser = ResponseParser(sink)
        self.num_requests += 1
        self._transport.write(data)

    def data_received(self, data: bytes) -> None:
        t = self._clock()
        if self._parser is None:
            self.abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        self._parser.feed(data, t)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._parser is not None and not self._parser.done:
            self._parser.eof(self._clock())

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    @property
    def reusable(self) -> bool:
        """The last response ended cleanly and the server keeps the connection open."""
        p = self._parser
        return not self.closed and p is not None and p.done and p.keep_alive and not p.leftover

    def recycle(self) -> None:
        """Ready for the next request (only after :attr:`reusable`)."""
        self._parser = None

    def abort(self) -> None:
        """Drop the connection now (cancellation, timeout)."""
        self.closed = True
        if self._transport is not None:
            self._transport.abort()
