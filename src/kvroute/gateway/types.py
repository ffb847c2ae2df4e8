"""The gateway's small shared vocabulary: requests, responses, handlers.

Every middleware has the same shape: a class built with the next handler (``app``)
and its own settings, that is itself a :data:`Handler`::

    class SomeMiddleware:
        def __init__(self, app: Handler, ...) -> None: ...
        async def __call__(self, request: Request) -> Response: ...

A :class:`Response` either carries its whole ``body`` or a ``stream``: a
:class:`BodyStream` that pushes pieces into the connection's :class:`BodySink` as
they come (no buffering, no task switch per piece; :class:`IteratorStream` adapts
any async iterator). ``closers`` run once the response is fully written or abandoned
(client gone), so a middleware that must act at the end of a stream (release an
admission slot, log the request) costs nothing per chunk.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from kvroute.types import TokenIds


class WorkloadClass(enum.Enum):
    """What kind of work a request is (see classify.py); a metrics label and route key."""

    STRUCTURED = "structured"
    AGENT = "agent"
    TOOLS = "tools"
    LONG_PREFIX = "long_prefix"
    CHAT = "chat"
    COMPLETION = "completion"


@dataclass(slots=True)
class RequestContext:
    """What the layers learn about one request as it passes; read by the access log
    and metrics at its end. Mutable by design: one per request, never shared."""

    request_id: str
    key_name: str = ""
    model: str = ""
    workload: WorkloadClass | None = None
    workload_reason: str = ""
    route_detail: str = ""
    """Why the backend was chosen, when the policy can say (cache_aware's predicted hits)."""
    route: str = ""
    pool: str = ""
    policy: str = ""
    backend: str = ""
    attempts: int = 0
    stream: bool = False
    error_kind: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_token_ids: tuple[str, TokenIds] | None = None
    """(tokenizer name, the prompt's ids) when the route tokenized it (cache_aware):
    capture reuses them instead of tokenizing again."""


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request as the server parsed it. Header names are lower case.

    ``received_s`` is the monotonic time its head was complete.
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    client: str
    received_s: float
    ctx: RequestContext


class BodySink(Protocol):
    """Where a streamed body goes: the client connection."""

    def write(self, data: bytes) -> None:
        """Send one piece now (framed as one HTTP chunk). A no-op once closed."""
        ...

    @property
    def closed(self) -> bool: ...

    @property
    def paused(self) -> bool:
        """The socket's buffer is full: stop producing until ``when_writable`` fires."""
        ...

    def when_writable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the sink accepts data again (or closes)."""
        ...

    async def drain(self) -> None:
        """Wait while paused."""
        ...


class BodyStream(Protocol):
    """A streamed body. ``send_to`` returns when the body is complete; cancelling it
    (the client left) must stop the producer."""

    async def send_to(self, sink: BodySink) -> None: ...


@dataclass(frozen=True, slots=True)
class IteratorStream:
    """A :class:`BodyStream` over an async iterator of pieces."""

    pieces: AsyncIterator[bytes]

    async def send_to(self, sink: BodySink) -> None:
        async for piece in self.pieces:
            if sink.closed:
                return
            sink.write(piece)
            if sink.paused:
                await sink.drain()


@dataclass(slots=True)
class Response:
    """Status, headers (name, value) and either ``body`` or ``stream``."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: BodyStream | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Run the closers once (the server calls this; idempotent)."""
        closers, self.closers = self.closers, []
        for fn in closers:
            fn()


Handler = Callable[[Request], Awaitable[Response]]


def json_response(
    status: int, payload: Any, headers: list[tuple[str, str]] | None = None
) -> Response:
    return Response(
        status,
        [("content-type", "application/json"), *(headers or [])],
        orjson.dumps(payload),
    )
