"""Incremental Server-Sent Events framing and parsing (the WHATWG ``text/event-stream`` rules).

The one SSE implementation of kvroute: the gateway's relay (:mod:`kvroute.gateway.proxy.sse_relay`)
uses :func:`last_event_end` and :func:`split_events` to forward whole events byte for
byte; bench's stream reader uses :class:`SSEParser` to get each event's data.

Bytes arrive in pieces cut anywhere: mid-line, mid-UTF-8 sequence, between the CR and
LF of a CRLF. Lines end with LF, CRLF or a lone CR; a blank line ends an event. A CR
that ends a piece ends its line (a LF that starts the next piece is then an empty line,
which dispatches nothing). In an event, lines starting with ``:`` are comments
(keep-alive pings), counted and dropped; ``data`` lines are joined with LF; ``event``
names it; ``id`` and ``retry`` are accepted and ignored. An event with no ``data`` line
dispatches nothing. Data stays bytes (``orjson`` decodes bytes directly); an
unterminated event at the end of the stream is discarded, as the standard says.

Pure and synchronous: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_COLON = 58  # ord(":")
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BLANK_LINE = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
"""A line end followed by an empty line: where an event ends. The first line end never
takes the CR of a CRLF alone, so a CRLF is not read as two line ends."""


def last_event_end(data: bytes) -> int:
    """The offset just past the blank line that ends the last complete event in
    ``data``; 0 when no event in it is complete."""
    if b"\r" not in data:
        cut = data.rfind(b"\n\n")
        return cut + 2 if cut >= 0 else 0
    end = 0
    for match in _BLANK_LINE.finditer(data):
        end = match.end()
    return end


def split_events(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``(event, terminator)`` for each complete event in ``data``, in order: the event's
    lines and the line ends that close it, so ``event + terminator`` are its bytes.
    Bytes after the last complete event are not returned (see :func:`last_event_end`)."""
    if b"\r" not in data:
        pieces = data.split(b"\n\n")
        for piece in pieces[:-1]:
            yield piece, b"\n\n"
        return
    start = 0
    for match in _BLANK_LINE.finditer(data):
        yield data[start : match.start()], match.group()
        start = match.end()


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: bytes
    event: str = "message"


class SSEParser:
    """Feed body bytes in, get complete events out. One parser per stream."""

    __slots__ = ("_buf", "num_comments", "num_events")

    def __init__(self) -> None:
        self._buf = b""
        self.num_comments = 0
        self.num_events = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk`` (possibly none), in order."""
        buf = self._buf + chunk if self._buf else chunk
        end = last_event_end(buf)
        self._buf = buf[end:]
        if not end:
            return []
        events: list[SSEEvent] = []
        for raw, _ in split_events(buf[:end]):
            event = self._event(raw)
            if event is not None:
                events.append(event)
        return events

    def _event(self, raw: bytes) -> SSEEvent | None:
        data: list[bytes] | None = None
        name = "message"
        lines = raw.split(b"\n") if b"\r" not in raw else _LINE_END.split(raw)
        for line in lines:
            if not line:
                continue  # a leading empty line: the tail of the previous blank line
            if line[0] == _COLON:
                self.num_comments += 1
                continue
            field, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                if data is None:
                    data = [value]
                else:
                    data.append(value)
            elif field == b"event":
                name = value.decode("utf-8", "replace")
        if data is None:
            return None
        self.num_events += 1
        return SSEEvent(b"\n".join(data), name or "message")

    @property
    def pending(self) -> bool:
        """Whether part of an event has been read but not dispatched yet."""
        return bool(self._buf)
