"""A tiny OpenAI-style SSE server for the faults a real engine cannot produce on demand.

Used ONLY for malformed streams, split and odd framing, servers that never send a
token, resets mid-stream, error statuses and error objects in a stream; everything
that depends on engine behaviour is tested against real llama-server instead.

The request's ``fault`` field (else its ``model``) picks the behaviour (see :data:`MODES`). The server runs on
its own thread and event loop, so synchronous code (``run_bench``) can call it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MODES = (
    "ok",
    "split",
    "malformed",
    "silent",
    "hang",
    "reset",
    "http500",
    "http400",
    "stream_error",
    "empty",
    "json",
    "slow",
    "plain",
    "late_token",
    "once",
)


def _chunk(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(content: str | None = None, **extra: Any) -> dict[str, Any]:
    delta: dict[str, Any] = dict(extra)
    if content is not None:
        delta["content"] = content
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }


def sse_events(tokens: list[str], *, prompt_tokens: int = 10) -> list[bytes]:
    """What a well-behaved engine streams: role chunk, tokens, finish, usage, [DONE]."""
    out = [_chunk(_delta(None, role="assistant"))]
    out += [_chunk(_delta(t)) for t in tokens]
    out.append(_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(
        _chunk(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": len(tokens),
                    "prompt_tokens_details": {"cached_tokens": 4},
                },
                "timings": {"cache_n": 4, "prompt_n": prompt_tokens - 4},
            }
        )
    )
    out.append(b"data: [DONE]\n\n")
    return out


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


class FakeUpstream:
    """Serves on 127.0.0.1:``port`` from a background thread; ``num_requests`` counts POSTs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.num_requests = 0
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop
        )
        self._server = fut.result(5)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        num_on_connection = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                self.num_requests += head.startswith(b"POST ")
                mode = str(body.get("fault") or body.get("model") or "ok")
                num_on_connection += 1
                if mode == "once" and num_on_connection > 1:
                    writer.transport.abort()  # a kept-alive connection dropped under a request
                    return
                if not await self._answer(mode, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer(self, mode: str, body: dict[str, Any], w: asyncio.StreamWriter) -> bool:
        """Write one response; False when the connection must end."""
        tokens = [f" tok{i}" for i in range(int(body.get("max_tokens", 5)))]
        if mode in ("ok", "plain", "once"):
            w.write(_HEAD + b"".join(chunked(e) for e in sse_events(tokens)) + b"0\r\n\r\n")
        elif mode == "split":
            # CRLF line ends, comment pings, and chunk boundaries every 7 bytes.
            raw = b": ping\r\n\r\n" + b"".join(
                e.replace(b"\n", b"\r\n") for e in sse_events(tokens)
            )
            w.write(_HEAD)
            for i in range(0, len(raw), 7):
                w.write(chunked(raw[i : i + 7]))
                await w.drain()
                await asyncio.sleep(0)
            w.write(b"0\r\n\r\n")
        elif mode == "malformed":
            events = sse_events(tokens)
            events.insert(2, b"data: {not json\n\n")
            w.write(_HEAD + b"".join(chunked(e) for e in events) + b"0\r\n\r\n")
        elif mode == "silent":
            w.write(_HEAD + chunked(sse_events(tokens)[0]))
            await w.drain()
            await asyncio.sleep(3600)
        elif mode == "hang":
            await asyncio.sleep(3600)
        elif mode == "reset":
            w.write(_HEAD + b"".join(chunked(e) for e in sse_events(tokens)[:3]))
            await w.drain()
            w.transport.abort()
            return False
        elif mode in ("http500", "http400"):
            code = b"500 Internal Server Error" if mode == "http500" else b"400 Bad Request"
            payload = b'{"error": {"message": "boom"}}'
            w.write(
                b"HTTP/1.1 "
                + code
                + b"\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(payload)).encode()
                + b"\r\n\r\n"
                + payload
            )
        elif mode == "stream_error":
            events = [*sse_events(tokens)[:2], _chunk({"error": {"message": "engine fell over"}})]
            w.write(_HEAD + b"".join(chunked(e) for e in events) + b"0\r\n\r\n")
        elif mode == "empty":
            w.write(
                _HEAD + chunked(sse_events([])[0]) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            )
        elif mode == "json":
            parts = ['{"name": ', '"Ada", ', '"age": 36}']
            w.write(_HEAD + b"".join(chunked(e) for e in sse_events(parts)) + b"0\r\n\r\n")
        elif mode == "late_token":
            # The head and the role chunk at once; the first token 0.3 s later.
            events = sse_events(tokens)
            w.write(_HEAD + chunked(events[0]))
            await w.drain()
            await asyncio.sleep(0.3)
            w.write(b"".join(chunked(e) for e in events[1:]) + b"0\r\n\r\n")
        elif mode == "slow":
            w.write(_HEAD)
            for event in sse_events(tokens):
                w.write(chunked(event))
                await w.drain()
                await asyncio.sleep(0.05)
            w.write(b"0\r\n\r\n")
        await w.drain()
        return True


@contextmanager
def fake_upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()
