"""The stub OpenAI upstream of the gateway benchmarks (``gateway_overhead.py``,
``gateway_peers.py``, ``gateway_rollout.py``), and the gateway process they start.

The stub (raw asyncio) answers every POST (a chat completion) with a stream of
``tokens`` chunks, ``interval_s`` apart, plus the usage chunk when asked, then
``[DONE]``; GETs of ``/health``, ``/v1/models`` and sglang's ``/get_model_info`` /
``/get_server_info`` get small fixed JSON answers (the routers compared in
``gateway_peers.py`` probe them). Each process pins itself to one CPU.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import httptools

from gateway_load import HOST

# -- the stub upstream ------------------------------------------------------------------


# no model_path / tokenizer_path: given one, sglang-router tries to download that
# tokenizer from the Hugging Face hub (the stub has none)
_STUB_MODEL_INFO = b'{"is_generation":true,"preferred_sampling_params":null}'
_STUB_GET: dict[bytes, tuple[bytes, bytes]] = {
    b"/health": (b"200 OK", b""),
    b"/health_generate": (b"200 OK", b""),
    b"/v1/models": (
        b"200 OK",
        b'{"object":"list","data":[{"id":"stub","object":"model","created":0,"owned_by":"stub"}]}',
    ),
    b"/get_model_info": (b"200 OK", _STUB_MODEL_INFO),
    b"/model_info": (b"200 OK", _STUB_MODEL_INFO),
    b"/get_server_info": (b"200 OK", b"{}"),
    b"/server_info": (b"200 OK", b"{}"),
}


class _StubProtocol(asyncio.Protocol):
    def __init__(self, tokens: int, interval_s: float) -> None:
        self.tokens, self.interval_s = tokens, interval_s
        self.parser = httptools.HttpRequestParser(self)
        self.body = bytearray()
        self.url = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            # not HTTP/1.1: sglang-router probes for gRPC / HTTP/2 (PRI *) first
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self.body = bytearray()
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        if self.parser.get_method() == b"GET":
            # what routers probe before accepting a worker (bench/gateway_peers.py):
            # liveness, the model list, and sglang's info endpoints; no streaming.
            self._answer_get(self.url.split(b"?", 1)[0])
            return
        usage = b'"include_usage":true' in self.body
        asyncio.get_running_loop().create_task(self._answer(usage))

    def _answer_get(self, path: bytes) -> None:
        t = self.transport
        assert t is not None
        status, body = _STUB_GET.get(path, (b"404 Not Found", b'{"error":"not found"}'))
        t.write(
            b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(body), body)
        )

    async def _answer(self, usage: bool) -> None:
        t = self.transport
        assert t is not None
        t.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for i in range(self.tokens):
            event = (
                b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"stub",'
                b'"choices":[{"index":0,"delta":{"content":"tok%d"},"finish_reason":null}]}\n\n' % i
            )
            t.write(b"%x\r\n%s\r\n" % (len(event), event))
            if self.interval_s:
                await asyncio.sleep(self.interval_s)
        tail = b""
        if usage:
            tail += (
                b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"stub",'
                b'"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":%d,'
                b'"total_tokens":%d}}\n\n' % (self.tokens, self.tokens + 10)
            )
        tail += b"data: [DONE]\n\n"
        t.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))


def _run_stub(port: int, tokens: int, interval_s: float, cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    try:  # the compiled build, as `kvroute serve` runs (kvroute/__main__.py)
        from kvroute import _accel

        print(f"[gateway] compiled: {_accel.enable()}", flush=True)
    except ImportError:  # a tree from before kvroute._accel: its package __init__s do it
        pass
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _StubProtocol(tokens, interval_s), HOST, port, backlog=4096
        )
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def _run_gateway(config_path: str, cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    try:  # the compiled build, as `kvroute serve` runs (kvroute/__main__.py)
        from kvroute import _accel

        print(f"[gateway] compiled: {_accel.enable()}", flush=True)
    except ImportError:  # a tree from before kvroute._accel: its package __init__s do it
        pass
    import uvloop

    from kvroute.gateway.app import Gateway
    from kvroute.gateway.config.gateway import load_config
    from kvroute.gateway.service import serve_until_signalled

    config = load_config(Path(config_path))
    uvloop.run(serve_until_signalled(Gateway(config, config_path=Path(config_path))))
