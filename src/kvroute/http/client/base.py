"""The client vocabulary: where requests go, what is sent, what comes back, how it fails.

:class:`Transport` is what the gateway's proxy talks to (tests can hand it any
implementation); :class:`~kvroute.http.client.pool.PooledTransport` is the real one.
A response is taken either as an :class:`Exchange` (awaited: head, then reads or an
attached callback) or pushed, piece by piece with receive times, to a
:class:`ResponseReceiver` (bench's load generator: no task switch per request or
piece). Every failure is an :class:`UpstreamFailure` whose ``kind`` says what happened
and whether any response byte had arrived (which decides whether a retry is safe).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from kvroute.errors import UsageError

Clock = Callable[[], float]
"""Seconds on a monotonic clock."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a transport connects, from a base URL ``http(s)://host[:port][/prefix]``:
    request paths are appended to ``path_prefix``."""

    tls: bool
    host: str
    port: int
    host_header: str
    path_prefix: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        """Raises :class:`UsageError` for anything but an http(s) URL with a host."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"URL must be http(s)://host[:port], got {url!r}")
        tls = parts.scheme == "https"
        try:
            port = parts.port or (443 if tls else 80)
        except ValueError:
            raise UsageError(f"bad port in URL {url!r}") from None
        return cls(tls, parts.hostname, port, parts.netloc, parts.path.rstrip("/"))

    def encode(self, request: UpstreamRequest) -> bytes:
        """``request`` as the HTTP/1.1 bytes sent to this origin (kept alive)."""
        lines = [
            f"{request.method} {self.path_prefix}{request.path} HTTP/1.1\r\n"
            f"host: {self.host_header}\r\ncontent-length: {len(request.body)}\r\n"
        ]
        lines.extend(f"{name}: {value}\r\n" for name, value in request.headers)
        lines.append("\r\n")
        return "".join(lines).encode("latin-1") + request.body


class FailureKind(enum.Enum):
    CONNECT = "connect"
    """Nothing accepted the connection (refused, unreachable, connect timeout)."""
    RESET = "reset"
    """The connection closed or reset before the response ended."""
    FIRST_BYTE_TIMEOUT = "first_token_timeout"
    TOTAL_TIMEOUT = "total_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    """A stream in progress sent nothing for the idle limit (a stalled engine)."""
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


class ResponseReceiver(Protocol):
    """Takes one response as the connection parses it, in the socket's own callback.

    ``t`` is the transport's clock read once per socket read, as the bytes arrived (pieces
    parsed from one read share it). Exactly one of :meth:`on_end` and :meth:`on_failure`
    ends a response that was started; a receiver that gives up early aborts the
    connection and may then still get :meth:`on_failure`, which it can ignore.
    """

    def on_head(self, status: int, headers: dict[str, str], t: float) -> None: ...

    def on_body(self, data: bytes, t: float) -> None: ...

    def on_end(self, t: float) -> None: ...

    def on_failure(self, failure: UpstreamFailure, t: float) -> None: ...


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

    async def finished(self, timeout_s: float, idle_s: float | None = None) -> None:
        """Wait for the end of the body, at most ``timeout_s``, and at most ``idle_s``
        without a body piece; raise :class:`UpstreamFailure` if it fails first."""
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
