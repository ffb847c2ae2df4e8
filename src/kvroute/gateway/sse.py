"""Server-sent-event pass-through: forward complete events, watch for usage. Pure.

Bytes are forwarded event by event as they complete (a piece that ends mid-event
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

_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_MAX_PENDING_BYTES = 1 << 20


class SseRelay:
    """Feed upstream bytes in, forward what :meth:`feed` returns.

    After the stream, ``usage`` is the last usage object seen and ``usage_event`` the
    decoded event that carried it (llama.cpp's ``timings`` ride there too).
    """

    __slots__ = ("_pending", "num_events_forwarded", "strip_usage", "usage", "usage_event")

    def __init__(self, *, strip_usage: bool) -> None:
        self.strip_usage = strip_usage
        self._pending = b""
        self.usage: dict[str, Any] | None = None
        self.usage_event: dict[str, Any] | None = None
        self.num_events_forwarded = 0

    def feed(self, data: bytes) -> bytes:
        """The complete events in ``data`` (plus what was pending), ready to forward."""
        if self._pending:
            data = self._pending + data
            self._pending = b""
        cut = data.rfind(b"\n\n")
        if cut < 0:
            if len(data) > _MAX_PENDING_BYTES:  # not SSE framing after all: pass it on
                return data
            self._pending = data
            return b""
        if cut + 2 < len(data):
            self._pending = data[cut + 2 :]
            data = data[: cut + 2]
        if _USAGE.search(data) is None:
            return data
        return self._rewrite(data)

    def finish(self) -> bytes:
        """Whatever was left pending when the upstream ended (an unterminated event)."""
        rest, self._pending = self._pending, b""
        return rest

    def _rewrite(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for event in data.split(b"\n\n")[:-1]:
            kept = self._one(event)
            if kept is not None:
                out.append(kept + b"\n\n")
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
