"""A stand-in for llama-server's streamed ``/v1/completions``, with fixed delays.

Run:  python bench/llamacpp_stub.py PORT [--output-len N] [--ttft-ms T] [--itl-ms I]

Writes exactly llama.cpp's stream (token chunks, then a final chunk with an empty
text, ``finish_reason``, ``usage`` and ``timings``, then ``[DONE]``), the first token
``--ttft-ms`` after the request arrived and the others ``--itl-ms`` apart. Requests
carry a ``[0007]``-style tag in their prompt; ``GET /stats`` answers, per tag, when the
request was received and when its first token was written (``time.monotonic()``), and
forgets them. Used by ``bench/bench_agreement.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from typing import Any


def serve_stub(port: int, ttft_ms: float, itl_ms: float, output_len: int) -> None:
    """Serve on 127.0.0.1:``port`` until killed (or an hour); prints ``ready``."""

    def chunk(obj: dict[str, Any]) -> bytes:
        data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    token = chunk({"choices": [{"text": " tok", "index": 0, "finish_reason": None}]})
    final = chunk(
        {
            "choices": [{"text": "", "index": 0, "finish_reason": "length"}],
            "usage": {"completion_tokens": output_len, "prompt_tokens": 64, "total_tokens": 0},
            "timings": {"cache_n": 0, "prompt_n": 64},
        }
    )
    done = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )

    # prompt tag -> [request received, first token written] (monotonic clock), per run
    seen: dict[str, list[float]] = {}

    class Stub(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = b""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            now = time.monotonic()
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buf[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buf) < end + 4 + length:
                return
            request, self.buf = self.buf[: end + 4 + length], self.buf[end + 4 + length :]
            if request.startswith(b"GET /stats"):  # this run's server-side times, then reset
                body = json.dumps(seen).encode()
                seen.clear()
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                return
            tag = re.search(rb"\[(\d{4})\]", request)
            times = seen.setdefault(tag.group(1).decode() if tag else "?", [now, 0.0])
            loop, t = asyncio.get_running_loop(), self.transport

            def first() -> None:
                times[1] = time.monotonic()
                t.write(token)

            t.write(head)
            loop.call_later(ttft_ms / 1000, first)
            for i in range(1, output_len - 1):
                loop.call_later((ttft_ms + i * itl_ms) / 1000, t.write, token)
            at = (ttft_ms + (output_len - 1) * itl_ms) / 1000
            loop.call_later(at, t.write, (token if output_len > 1 else b"") + final + done)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Stub, "127.0.0.1", port)
        print("ready", flush=True)
        async with server:
            await asyncio.sleep(3600)

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    args = ap.parse_args()
    serve_stub(args.port, args.ttft_ms, args.itl_ms, args.output_len)


if __name__ == "__main__":
    main()
