"""One response's bytes as a :class:`RequestRecord`: first byte (the response head),
first token (the first chunk carrying ``content``, reasoning — ``reasoning_content`` or
``reasoning`` — or a ``tool_calls`` delta, or ``text`` for completions; role-only chunks
do not count), every later content chunk, the ``usage`` chunk
(``stream_options.include_usage``) and llama.cpp's ``timings``. Non-streaming JSON
answers are read too (their first token is their end). :mod:`kvroute.bench.client.send`
sends the request; the connection pushes the response here (a
:class:`~kvroute.http.client.ResponseReceiver`), each piece with its receive time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.http.client import FailureKind, UpstreamFailure
from kvroute.http.sse import SSEEvent, SSEParser

_ERROR_BODY_BYTES = 2048


class StreamSink:
    """Reads one response into ``rec``; resolves ``done`` when the request is over.

    ``abort`` drops the connection (called on cancel and on unreadable streams); the
    sender sets it once the request is on a connection. All times are the transport
    clock's readings minus ``t0``.
    """

    __slots__ = (
        "_body",
        "_cancel_after",
        "_is_sse",
        "_keep_text",
        "_sse",
        "_t0",
        "_text",
        "_tool_args",
        "abort",
        "done",
        "rec",
    )

    def __init__(
        self,
        rec: RequestRecord,
        done: asyncio.Future[None],
        *,
        t0: float,
        keep_text: bool = False,
        cancel_after_chunks: int | None = None,
    ) -> None:
        self.rec = rec
        self.done = done
        self.abort: Callable[[], None] = _nothing
        self._t0 = t0
        self._keep_text = keep_text
        self._cancel_after = cancel_after_chunks
        self._sse = SSEParser()
        self._is_sse = True
        self._body = bytearray()
        self._text: list[str] = []
        self._tool_args: list[str] = []

    # ResponseReceiver ----------------------------------------------------------
    def on_head(self, status: int, headers: dict[str, str], t: float) -> None:
        rec = self.rec
        rec.first_byte_s = t - self._t0
        rec.http_status = status
        self._is_sse = status == 200 and "text/event-stream" in headers.get("content-type", "")

    def on_body(self, data: bytes, t: float) -> None:
        if self.done.done():
            return
        if not self._is_sse:
            if self.rec.http_status == 200 or len(self._body) < _ERROR_BODY_BYTES:
                self._body += data
            return
        for event in self._sse.feed(data):
            self._event(event, t)
            if self.done.done():
                return

    def on_end(self, t: float) -> None:
        if self.done.done():
            return
        rec = self.rec
        status = rec.http_status or 0
        if status != 200:
            kind = (
                ErrorKind.HTTP_4XX
                if 400 <= status < 500
                else ErrorKind.HTTP_5XX
                if status >= 500
                else ErrorKind.HTTP_OTHER
            )
            excerpt = bytes(self._body[:300]).decode("utf-8", "replace").strip()
            self._finish_error(kind, f"HTTP {status}: {excerpt}", t)
            return
        if not self._is_sse:
            self._json_body(t)
        elif self._sse.pending:
            self._finish_error(ErrorKind.MALFORMED_STREAM, "stream ended inside an event", t)
            return
        if rec.outcome is Outcome.OK and rec.first_token_s is None:
            self._finish_error(ErrorKind.EMPTY, "the response carried no content token", t)
            return
        rec.end_s = t - self._t0
        self._keep()
        self.done.set_result(None)

    def on_failure(self, failure: UpstreamFailure, t: float) -> None:
        kind = (
            ErrorKind.MALFORMED_HTTP if failure.kind is FailureKind.MALFORMED else ErrorKind.RESET
        )
        self._finish_error(kind, failure.detail, t)

    # Outside events -------------------------------------------------------------
    def expire(self, kind: ErrorKind, detail: str, t: float) -> None:
        """A timer fired: give up on the request now."""
        self._finish_error(kind, detail, t)
        self.abort()

    # Internals -----------------------------------------------------------------
    def _finish_error(self, kind: ErrorKind, detail: str, t: float) -> None:
        if self.done.done():
            return
        self.rec.fail(kind, detail, t - self._t0)
        self._keep()
        self.done.set_result(None)

    def _keep(self) -> None:
        if self._keep_text:
            self.rec.text = "".join(self._text)
            self.rec.tool_arguments = "".join(self._tool_args) if self._tool_args else None

    def _event(self, event: SSEEvent, t: float) -> None:
        data = event.data
        if data == b"[DONE]":
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._malformed(f"event data is not JSON: {data[:80]!r}", t)
            return
        if not isinstance(obj, dict):
            self._malformed(f"event data is not a JSON object: {data[:80]!r}", t)
            return
        if "error" in obj:
            self._finish_error(ErrorKind.STREAM_ERROR, str(obj["error"])[:300], t)
            self.abort()
            return
        self._chunk(obj, t)

    def _malformed(self, detail: str, t: float) -> None:
        self._finish_error(ErrorKind.MALFORMED_STREAM, detail, t)
        self.abort()

    def _chunk(self, obj: dict[str, Any], t: float) -> None:
        rec = self.rec
        choices = obj.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                tool_calls = delta.get("tool_calls")
                has_token = bool(
                    content
                    or delta.get("reasoning_content")
                    or delta.get("reasoning")
                    or tool_calls
                )
                if self._keep_text:
                    if isinstance(content, str):
                        self._text.append(content)
                    if isinstance(tool_calls, list):
                        self._tool_args.extend(_tool_arg_pieces(tool_calls))
            else:
                text = choice.get("text")
                has_token = bool(text)
                if self._keep_text and isinstance(text, str):
                    self._text.append(text)
            reason = choice.get("finish_reason")
            if reason:
                rec.finish_reason = str(reason)
            if has_token:
                rel = t - self._t0
                if rec.first_token_s is None:
                    rec.first_token_s = rel
                rec.chunk_times_s.append(rel)
                if self._cancel_after is not None and len(rec.chunk_times_s) >= self._cancel_after:
                    self._cancel(t)
                    return
        usage = obj.get("usage")
        timings = obj.get("timings")
        if isinstance(usage, dict) or isinstance(timings, dict):
            body = rec.usage_body if rec.usage_body is not None else {}
            if isinstance(usage, dict):
                body["usage"] = usage
                rec.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
                rec.completion_tokens = _int_or_none(usage.get("completion_tokens"))
            if isinstance(timings, dict):
                body["timings"] = timings
            rec.usage_body = body

    def _cancel(self, t: float) -> None:
        rec = self.rec
        rec.outcome = Outcome.CANCELLED
        rec.end_s = t - self._t0
        self._keep()
        self.done.set_result(None)
        self.abort()

    def _json_body(self, t: float) -> None:
        """A non-streamed answer: its one message is its first (and last) token."""
        try:
            obj = orjson.loads(bytes(self._body))
        except orjson.JSONDecodeError:
            self.rec.fail(ErrorKind.MALFORMED_STREAM, "response body is not JSON", t - self._t0)
            return
        if not isinstance(obj, dict) or "error" in obj:
            self.rec.fail(ErrorKind.STREAM_ERROR, str(obj)[:300], t - self._t0)
            return
        choice = (obj.get("choices") or [{}])[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        content: Any = message.get("content") if isinstance(message, dict) else choice.get("text")
        if content or (isinstance(message, dict) and message.get("tool_calls")):
            self.rec.first_token_s = t - self._t0
            self.rec.chunk_times_s.append(t - self._t0)
            if self._keep_text and isinstance(content, str):
                self._text.append(content)
            if (
                self._keep_text
                and isinstance(message, dict)
                and isinstance(message.get("tool_calls"), list)
            ):
                self._tool_args.extend(_tool_arg_pieces(message["tool_calls"]))
        self.rec.finish_reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        self._chunk({k: v for k, v in obj.items() if k in ("usage", "timings")}, t)


def _tool_arg_pieces(tool_calls: list[Any]) -> list[str]:
    """Argument text of the first tool call (index 0) in a delta or a message."""
    out = []
    for call in tool_calls:
        if not isinstance(call, dict) or call.get("index", 0) != 0:
            continue
        fn = call.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            out.append(fn["arguments"])
    return out


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _nothing() -> None:
    """The abort of a sink not on a connection yet."""
