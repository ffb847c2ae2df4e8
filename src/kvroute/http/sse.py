"""Incremental Server-Sent Events parsing (the WHATWG ``text/event-stream`` rules).

Bytes arrive in pieces cut anywhere: mid-line, mid-UTF-8 sequence, between the CR and
LF of a CRLF. :meth:`SSEParser.feed` keeps the incomplete last line and returns only
whole events. Lines end with LF, CRLF or a lone CR; a blank line ends an event; lines
starting with ``:`` are comments (keep-alive pings), counted and dropped; ``data``
lines of one event are joined with LF; ``event`` names it; ``id`` and ``retry`` are
accepted and ignored. An event with no ``data`` line dispatches nothing. Data stays
bytes (``orjson`` decodes bytes directly); an unterminated event at the end of the
stream is discarded, as the standard says.

Pure and synchronous: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

_COLON = 58  # ord(":")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: bytes
    event: str = "message"


class SSEParser:
    """Feed body bytes in, get complete events out. One parser per stream."""

    __slots__ = ("_buf", "_data", "_event", "_skip_lf", "num_comments", "num_events")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] | None = None
        self._event: str | None = None
        self._skip_lf = False
        self.num_comments = 0
        self.num_events = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk`` (possibly none), in order."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: it ends the line
            # now, and a LF that starts the next piece is then dropped.
            self._skip_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data is not None:
                    events.append(SSEEvent(b"\n".join(self._data), self._event or "message"))
                    self.num_events += 1
                self._data = None
                self._event = None
            elif line[0] == _COLON:
                self.num_comments += 1
            else:
                self._field(line)
        return events

    def _field(self, line: bytes) -> None:
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            if self._data is None:
                self._data = [value]
            else:
                self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

    @property
    def pending(self) -> bool:
        """Whether part of an event has been read but not dispatched yet."""
        return bool(self._buf) or self._data is not None
