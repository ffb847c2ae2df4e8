"""The server side's small shared vocabulary: requests, responses, handlers, and the
OpenAI error body every layer answers with.

A handler is ``async (HttpRequest) -> Response``; a middleware is a class built with the
next handler and its own settings that is itself a handler.

A :class:`Response` either carries its whole ``body`` or a ``stream``: a
:class:`BodyStream` that pushes pieces into the connection's :class:`BodySink` as they
come (no buffering, no task switch per piece; :class:`IteratorStream` adapts any async
iterator). ``closers`` run once the response is fully written or abandoned (client
gone), so a layer that must act at the end of a stream (release an admission slot, log
the request) costs nothing per chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import orjson

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class HttpRequest(Generic[C]):
    """One HTTP request as the server parsed it. Header names are lower case.

    ``received_s`` is the monotonic time its head was complete; ``request_id`` is the
    client's ``x-request-id`` (first 128 characters) or one the server made, and is
    sent back on the answer. ``ctx`` is what the application keeps about the request
    while it is answered, made by the server's ``new_context(request_id)``.
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    client: str
    received_s: float
    request_id: str
    ctx: C


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


Handler = Callable[[HttpRequest[C]], Awaitable[Response]]


def json_response(
    status: int, payload: Any, headers: list[tuple[str, str]] | None = None
) -> Response:
    return Response(
        status,
        [("content-type", "application/json"), *(headers or [])],
        orjson.dumps(payload),
    )


def error_payload(message: str, error_type: str, param: str | None, code: str | None) -> bytes:
    """OpenAI-style error JSON: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    )


def sse_error_event(message: str, error_type: str, code: str) -> bytes:
    """A terminal SSE event: the OpenAI SDK raises ``APIError`` on a data event with
    an ``error`` member; ``[DONE]`` follows so line-based clients stop too."""
    return b"data: " + error_payload(message, error_type, None, code) + b"\n\ndata: [DONE]\n\n"
