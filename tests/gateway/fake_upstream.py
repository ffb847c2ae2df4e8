"""A tiny asyncio OpenAI-ish upstream, for faults a real engine cannot produce on
demand: a reset in the middle of a stream, a hung socket, a 503. Everything else is
tested against real engines (test_engines_*.py).

Each request is answered according to ``mode`` (settable between requests) and
recorded (path, headers, body) so tests can check what the gateway forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
from dataclasses import dataclass, field

import httptools
import orjson


class Mode(enum.Enum):
    STREAM = "stream"
    """A normal answer: SSE for stream requests, JSON otherwise."""
    RESET_MID_STREAM = "reset_mid_stream"
    """Two SSE chunks, then the connection is reset."""
    HANG = "hang"
    """Read the request, never answer."""
    HANG_AFTER_FIRST = "hang_after_first"
    """One SSE chunk, then silence."""
    UNAVAILABLE = "unavailable"
    """503 with a JSON error."""
    BAD_REQUEST = "bad_request"
    """400 with a JSON error, like an engine rejecting a field."""
    SERVER_ERROR = "server_error"
    """500 with a JSON error, like llama-server on a request shape it cannot handle."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, object]:
        data = orjson.loads(self.body)  # json's C parser stops at 1,000 levels, orjson 1,024
        assert isinstance(data, dict)
        return data


@dataclass
class FakeUpstream:
    mode: Mode = Mode.STREAM
    num_tokens: int = 5
    token_interval_s: float = 0.0
    received: list[Received] = field(default_factory=list)
    num_disconnects: int = 0
    """Requests whose client (the gateway) went away before the answer ended."""
    port: int = 0
    _server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Proto(self), "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)


def chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def sse(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


_ERROR_STATUS = {
    Mode.UNAVAILABLE: b"503 Service Unavailable",
    Mode.BAD_REQUEST: b"400 Bad Request",
    Mode.SERVER_ERROR: b"500 Internal Server Error",
}


class _Proto(asyncio.Protocol):
    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.task: asyncio.Task[None] | None = None
        self.answering = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answering:
            self.fake.num_disconnects += 1
        if self.task is not None:
            self.task.cancel()

    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", {}, bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        if self.parser.get_method() == b"GET":  # health probes and scrapes
            body = b'{"object":"list","data":[{"id":"m"}]}' if self.url == b"/v1/models" else b""
            self.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            return
        received = Received(self.url.decode(), self.headers, bytes(self.body))
        self.fake.received.append(received)
        self.answering = True
        self.task = asyncio.get_running_loop().create_task(self.answer(received))

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.transport.is_closing():
            self.transport.write(data)

    async def answer(self, req: Received) -> None:
        fake, mode = self.fake, self.fake.mode
        if mode is Mode.HANG:
            await asyncio.sleep(3600)
        if mode in _ERROR_STATUS:
            status = _ERROR_STATUS[mode]
            body = json.dumps({"error": {"message": mode.value, "type": "x", "code": 1}}).encode()
            self.write(
                b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (status, len(body), body)
            )
            self.answering = False
            return
        data = req.json
        if not data.get("stream"):
            body = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": data.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hi"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
                }
            ).encode()
            self.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            self.answering = False
            return
        self.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for i in range(fake.num_tokens):
            self.write(
                chunk(
                    sse(
                        {
                            "object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {"content": f"t{i}"}}],
                        }
                    )
                )
            )
            if mode is Mode.HANG_AFTER_FIRST:
                await asyncio.sleep(3600)
            if mode is Mode.RESET_MID_STREAM and i == 1:
                await asyncio.sleep(0.01)
                assert self.transport is not None
                self.transport.abort()
                return
            await asyncio.sleep(fake.token_interval_s)
        options = data.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            self.write(
                chunk(
                    sse(
                        {
                            "object": "chat.completion.chunk",
                            "choices": [],
                            "usage": {
                                "prompt_tokens": 7,
                                "completion_tokens": fake.num_tokens,
                                "total_tokens": 7 + fake.num_tokens,
                            },
                        }
                    )
                )
            )
        self.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.answering = False
