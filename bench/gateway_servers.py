"""The server decision (issue 22): kvroute's own HTTP server against well-kept ones,
each with a bare handler and no framework, in one run on the same core.

Servers: kvroute's ``HttpServer`` (asyncio + httptools, uvloop); uvicorn with httptools
and uvloop (raw ASGI app); granian (Rust/hyper, its native RSGI interface, one worker,
one runtime thread); aiohttp's web server (a bare ``StreamResponse`` handler, uvloop).
Each answers every request with the gateway's typical answer: a streamed SSE body of
16 events, chunked. Each in turn runs alone on CPU 0 (``taskset``); the load generator
(``gateway_load.py``'s closed loop, kvroute's upstream client) runs on CPU 1.

Per server: closed loop (``--concurrency`` clients, ``--seconds``): req/s and the
server's CPU time per request (its process tree, /proc) — the issue's criterion
(keep our own only if the best well-kept server costs > 1.5x its CPU per request);
then (last repeat) an abuse check on raw sockets at each server's defaults: bytes of
an endless request line taken before it answers or closes (capped at 8 MiB), and
seconds until a partial head is cut (capped at ``--slow-cap-s``, 35: granian's
header read timeout is 30 s by default).

The peers live in a throwaway venv, never the project's::

    python3 -m venv /tmp/kvroute-bench/servers-venv
    /tmp/kvroute-bench/servers-venv/bin/pip install granian uvicorn httptools uvloop aiohttp

Run: ``.venv/bin/python bench/gateway_servers.py``; writes
``bench/gateway_servers_results.json``. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from gateway_load import _body, _closed_loop, _free_port
from gateway_peers import _tree_cpu_s

HOST = "127.0.0.1"
PEERS_PY = Path("/tmp/kvroute-bench/servers-venv/bin/python")
EVENT = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'

KVROUTE_APP = """
import asyncio, sys, uvloop
from kvroute.http.messages import IteratorStream, Response
from kvroute.http.server import HttpServer
EVENT = {event!r}
async def pieces():
    for _ in range(16):
        yield EVENT
async def handler(request):
    return Response(200, [("content-type", "text/event-stream")], stream=IteratorStream(pieces()))
async def main():
    server = HttpServer(handler, lambda request_id: None)
    await server.start("{host}", {port})
    await asyncio.Event().wait()
uvloop.run(main())
"""

UVICORN_APP = """
import uvicorn
EVENT = {event!r}
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({{"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]}})
    for _ in range(16):
        await send({{"type": "http.response.body", "body": EVENT, "more_body": True}})
    await send({{"type": "http.response.body", "body": b""}})
uvicorn.run(app, host="{host}", port={port}, http="httptools", loop="uvloop",
            log_level="warning", access_log=False)
"""

GRANIAN_APP = """
EVENT = {event!r}
async def app(scope, proto):
    await proto()
    stream = proto.response_stream(200, [("content-type", "text/event-stream")])
    for _ in range(16):
        await stream.send_bytes(EVENT)
"""

AIOHTTP_APP = """
import uvloop
from aiohttp import web
EVENT = {event!r}
async def handler(request):
    await request.read()
    resp = web.StreamResponse(headers={{"content-type": "text/event-stream"}})
    await resp.prepare(request)
    for _ in range(16):
        await resp.write(EVENT)
    await resp.write_eof()
    return resp
app = web.Application()
app.router.add_route("*", "/{{tail:.*}}", handler)
web.run_app(app, host="{host}", port={port}, access_log=None, print=None, loop=uvloop.new_event_loop())
"""


def _start(name: str, tmp: Path, port: int) -> subprocess.Popen[bytes]:
    fmt = {"event": EVENT, "host": HOST, "port": port}
    if name == "kvroute":
        script = tmp / "kv_app.py"
        script.write_text(KVROUTE_APP.format(**fmt))
        argv = [sys.executable, str(script)]
    elif name == "uvicorn-httptools":
        script = tmp / "uv_app.py"
        script.write_text(UVICORN_APP.format(**fmt))
        argv = [str(PEERS_PY), str(script)]
    elif name == "granian-rsgi":
        (tmp / "gr_app.py").write_text(GRANIAN_APP.format(**fmt))
        argv = [
            str(PEERS_PY.parent / "granian"),
            "--interface", "rsgi", "--host", HOST, "--port", str(port),
            "--workers", "1", "--runtime-threads", "1", "--loop", "uvloop", "--http", "1",
            "--log-level", "warning", "--no-ws", "gr_app:app",
        ]  # fmt: skip
    else:
        script = tmp / "ah_app.py"
        script.write_text(AIOHTTP_APP.format(**fmt))
        argv = [str(PEERS_PY), str(script)]
    return subprocess.Popen(
        ["taskset", "-c", "0", *argv],
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / f"{name}.log").open("wb"),
        start_new_session=True,
    )


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"did not start (exit {proc.poll()})")


def _endless_line_bytes(port: int) -> dict[str, Any]:
    sent = 0
    answer = b""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.settimeout(0.05)
        try:
            s.sendall(b"GET /")
            while sent < 8 * 1024 * 1024:
                s.sendall(b"a" * 16384)
                sent += 16384
                try:
                    answer = s.recv(200)
                except TimeoutError:
                    continue
                break
        except OSError:
            pass
    status = answer.split(b"\r\n", 1)[0].decode("latin-1") if answer else "(closed, no answer)"
    return {"bytes_taken": sent, "answer": status if sent < 8 * 1024 * 1024 else "none"}


def _partial_head_cut_s(port: int, cap_s: float) -> float | None:
    with socket.create_connection((HOST, port), timeout=cap_s) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        try:
            while s.recv(4096):
                pass
        except TimeoutError:
            return None
        except OSError:
            pass
        return round(time.monotonic() - t0, 2)


def measure(name: str, args: argparse.Namespace, body: bytes, abuse: bool) -> dict[str, Any]:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = _start(name, Path(tmp), port)
        try:
            _wait_ready(port, proc)
            url = f"http://{HOST}:{port}"
            asyncio.run(_closed_loop(url, args.concurrency, 2.0, body))  # warm-up
            cpu0 = _tree_cpu_s(proc.pid)
            closed = asyncio.run(_closed_loop(url, args.concurrency, args.seconds, body))
            cpu = _tree_cpu_s(proc.pid) - cpu0
            per_request_us = 1e6 * cpu / max(1, closed["requests"])
            out = {**closed, "cpu_us_per_request": round(per_request_us, 1)}
            if abuse:
                out["abuse"] = {
                    "endless_request_line": _endless_line_bytes(port),
                    "partial_head_cut_s": _partial_head_cut_s(port, args.slow_cap_s),
                }
            return out
        except RuntimeError as exc:
            return {"error": str(exc)}
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--slow-cap-s", type=float, default=35.0)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).with_name("gateway_servers_results.json")
    )
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})  # the load generator on the other core
    body = _body(stream=True)
    names = ["kvroute", "uvicorn-httptools", "granian-rsgi", "aiohttp"]
    if not PEERS_PY.exists():
        print(f"no peers venv at {PEERS_PY}: only kvroute is measured", file=sys.stderr)
        names = names[:1]
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for i in range(args.repeat):
        for name in names:  # interleaved: machine noise spreads over all of them
            result = measure(name, args, body, abuse=i == args.repeat - 1)
            runs[name].append(result)
            print(name, json.dumps(result), flush=True)
    summary = {}
    for name, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            summary[name] = {"error": results[0].get("error")}
            continue
        cpu = sorted(r["cpu_us_per_request"] for r in ok)
        rate = sorted(r["req_per_s"] for r in ok)
        summary[name] = {
            "cpu_us_per_request_median": cpu[len(cpu) // 2],
            "req_per_s_median": rate[len(rate) // 2],
            "abuse": ok[-1]["abuse"],
        }
    result = {
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "load_average": os.getloadavg(),
        "summary": summary,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
