"""Server-sent-event pass-through: forward complete events, watch for usage. Pure.

Bytes are forwarded event by event as they complete (framing by
:mod:`kvroute.http.sse`: LF, CRLF or CR line ends) (a piece that ends mid-event
waits for the rest: half an event is of no use to a client). Only events that carry a
``usage`` object are decoded; every other byte goes through untouched.

When the gateway added ``stream_options.include_usage`` for its own metrics
(``strip_usage``), the usage the client did not ask for is taken out again: the
usage-only chunk (``"choices": []``, what vLLM, SGLang and llama.cpp's chat endpoint
send) is dropped; a ``usage`` member riding on a chunk that also has choices (llama.cpp's
completions endpoint) is removed from that chunk, which is then re-encoded.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from kvroute.http.sse import last_event_end, split_events

_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_MAX_PENDING_BYTES = 1 << 20


class SseRelay:
    """Feed upstream bytes in, forward what :meth:`feed` returns.

    After the stream, ``usage`` is the last usage object seen and ``usage_event`` the
    decoded event that carried it (llama.cpp's ``timings`` ride there too).
    """

    __slots__ = (
        "_pending",
        "_skip_lf",
        "num_events_forwarded",
        "strip_usage",
        "usage",
        "usage_event",
    )

    def __init__(self, *, strip_usage: bool) -> None:
        self.strip_usage = strip_usage
        self._pending = b""
        self._skip_lf = False
        self.usage: dict[str, Any] | None = None
        self.usage_event: dict[str, Any] | None = None
        self.num_events_forwarded = 0

    def feed(self, data: bytes) -> bytes:
        """The complete events in ``data`` (plus what was pending), ready to forward."""
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if self._pending:
            data = self._pending + data
            self._pending = b""
        end = last_event_end(data)
        if not end:
            if len(data) > _MAX_PENDING_BYTES:  # not SSE framing after all: pass it on
                return data
            self._pending = data
            return b""
        if end < len(data):
            self._pending = data[end:]
            data = data[:end]
        if _USAGE.search(data) is None:
            return data
        out = self._rewrite(data)
        self._skip_lf = self._skip_lf and not self._pending
        return out

    def finish(self) -> bytes:
        """Whatever was left pending when the upstream ended (an unterminated event)."""
        rest, self._pending = self._pending, b""
        return rest

    def _rewrite(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for event, terminator in split_events(data):
            # An event may start with the LF of a CRLF whose CR ended the last piece:
            # those bytes stay, whatever becomes of the event.
            body = event.lstrip(b"\r\n")
            kept = self._one(body)
            if kept is not None:
                out.append(event[: len(event) - len(body)] + kept + terminator)
            elif len(body) < len(event):
                out.append(event[: len(event) - len(body)])
            # A dropped event whose last line end is a CR ending the data: the LF that
            # may start the next piece belongs to it and goes too.
            self._skip_lf = kept is None and terminator.endswith(b"\r")
        return b"".join(out)

    def _one(self, event: bytes) -> bytes | None:
        if _USAGE.search(event) is None or not event.startswith(b"data:"):
            return event
        try:
            body = orjson.loads(event[5:])
        except orjson.JSONDecodeError:
            return event
        if not isinstance(body, dict) or not isinstance(body.get("usage"), dict):
            return event
        self.usage = body["usage"]
        self.usage_event = body
        if not self.strip_usage:
            return event
        choices = body.get("choices")
        if isinstance(choices, list) and not choices:
            return None
        trimmed = {k: v for k, v in body.items() if k != "usage"}
        return b"data: " + orjson.dumps(trimmed)
