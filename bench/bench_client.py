"""Client headroom of `kvroute bench`: how fast can it send streamed requests?

Run:  .venv/bin/python bench/bench_client.py [--quick] [--only NAME]

A fast stub upstream (this script, ``--serve``, in its own process) answers every
request with a chunked SSE stream: role chunk, ``--tokens`` content chunks written
``--itl-ms`` apart, the usage chunk and ``[DONE]``. Against it:

1. ``rate1000``  open loop, constant 1,000 requests/s for 10 s, sharded over client
   processes: achieved vs scheduled rate, p99 dispatch delay (target ≤ 2 ms), errors.
2. ``rate200``   open loop, constant 200 requests/s for 10 s: achieved ≥ 99.5 %.
3. ``variants``  both rates with the pool's spare connections off / on (default 2)
   and with a 0.5 ms dispatch spin, interleaved run by run: p50 / p99 dispatch delay.
4. ``httpx``     the same closed loop (32 users, 3,000 requests) through kvroute's
   client and through httpx streaming with SSE lines parsed by ``aiter_lines``:
   requests/s and client CPU per request, to justify the raw client.

Everything runs on 127.0.0.1 and stops by itself. The machine is shared (2 cores):
numbers are medians of ``--repeat`` runs and come with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "bench_client_results.json"


# -- the stub upstream ---------------------------------------------------------------


def _sse(obj: dict[str, Any]) -> bytes:
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _Stub(asyncio.Protocol):
    def __init__(self, tokens: int, itl_s: float) -> None:
        self.tokens, self.itl_s = tokens, itl_s
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.role = _sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        self.token = _sse({"choices": [{"index": 0, "delta": {"content": " tok"}}]})
        self.tail = (
            _sse(
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 12,
                        "completion_tokens": tokens,
                        "prompt_tokens_details": {"cached_tokens": 0},
                    },
                }
            )
            + _sse_raw(b"data: [DONE]\n\n")
            + b"0\r\n\r\n"
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self._respond()

    def _respond(self) -> None:
        assert self.transport is not None
        t = self.transport
        t.write(self.head + self.role + self.token)
        loop = asyncio.get_running_loop()
        for i in range(1, self.tokens):
            loop.call_later(self.itl_s * i, t.write, self.token)
        loop.call_later(self.itl_s * self.tokens, t.write, self.tail)


def _sse_raw(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def serve(port: int, tokens: int, itl_ms: float) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _Stub(tokens, itl_ms / 1000), "127.0.0.1", port, backlog=4096
        )
        print("ready", flush=True)
        await asyncio.sleep(900)  # never outlives a benchmark by much
        server.close()

    asyncio.run(main())


# -- the measurements ----------------------------------------------------------------


def _requests(n: int) -> list[Any]:
    from kvroute.bench.workloads.base import Api, BenchRequest

    return [
        BenchRequest(
            i, "stub", Api.CHAT, {"messages": [{"role": "user", "content": f"q{i}"}]}, 12, 8
        )
        for i in range(n)
    ]


def _open_loop(
    url: str, rate: float, seconds: float, workers: int, *, spare: int = 2, spin_s: float = 0.0
) -> dict[str, Any]:
    from kvroute.bench.run_options import BenchEndpoint, RunOptions
    from kvroute.bench.runner import run_bench, workload_info
    from kvroute.bench.schedule import Arrival, OpenLoop
    from kvroute.bench.scrape import CacheMode

    reqs = _requests(int(rate * seconds))
    options = RunOptions(
        loads=(OpenLoop(rate, Arrival.CONSTANT),),
        cache=CacheMode.WARM,
        workers=workers,
        max_duration_s=seconds + 30,
        prewarm=16,
        spare_connections=spare,
        dispatch_spin_s=spin_s,
    )
    t = time.perf_counter()
    result = run_bench(
        reqs,
        workload_info("stub", {}, 0, "none", reqs),
        [BenchEndpoint("stub", url, model="m")],
        options,
    )
    s = result.runs[0].summary
    return {
        "rate": rate,
        "seconds": seconds,
        "workers": workers,
        "spare_connections": spare,
        "dispatch_spin_ms": spin_s * 1000,
        "load_average_1m": os.getloadavg()[0],
        "num_requests": len(reqs),
        "num_ok": s.num_ok,
        "errors": s.errors,
        "wall_s": time.perf_counter() - t,
        "scheduled_per_s": s.rates.scheduled_per_s,
        "achieved_per_s": s.rates.achieved_per_s,
        "achieved_share": s.rates.achieved_share,
        "dispatch_p50_ms": _ms(s.dispatch_delay_s.p50),
        "dispatch_p99_ms": _ms(s.dispatch_delay_s.p99),
        "dispatch_max_ms": _ms(s.dispatch_delay_s.max),
        "ttft_p50_ms": _ms(s.ttft_s.p50),
        "ttft_p99_ms": _ms(s.ttft_s.p99),
    }


VARIANTS = {"no spare": (0, 0.0), "2 spare (default)": (2, 0.0), "2 spare + 0.5 ms spin": (2, 5e-4)}


def _variants(url: str, seconds: float, repeat: int, workers: int) -> dict[str, Any]:
    """Connection spares and a dispatch spin, on and off, interleaved run by run so the
    machine's noise hits each alike; medians over ``repeat`` runs of each."""
    out: dict[str, Any] = {}
    for rate, num_workers in ((200.0, 1), (1000.0, workers)):
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
        for _ in range(repeat):
            for name, (spare, spin_s) in VARIANTS.items():
                runs[name].append(
                    _open_loop(url, rate, seconds, num_workers, spare=spare, spin_s=spin_s)
                )
        out[f"rate{rate:g}"] = {
            name: {
                key: statistics.median(r[key] for r in rs)
                for key in ("dispatch_p50_ms", "dispatch_p99_ms", "achieved_share")
            }
            | {
                "all_dispatch_p99_ms": [r["dispatch_p99_ms"] for r in rs],
                "load_average_1m": [r["load_average_1m"] for r in rs],
            }
            for name, rs in runs.items()
        }
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def _closed_kvroute(url: str, n: int, users: int) -> dict[str, Any]:
    from kvroute.bench.run_options import BenchEndpoint, RunOptions
    from kvroute.bench.runner import run_bench, workload_info
    from kvroute.bench.schedule import ClosedLoop
    from kvroute.bench.scrape import CacheMode

    reqs = _requests(n)
    options = RunOptions(loads=(ClosedLoop(users),), cache=CacheMode.WARM, max_duration_s=120)
    cpu0, t0 = _cpu(), time.perf_counter()
    result = run_bench(
        reqs,
        workload_info("stub", {}, 0, "none", reqs),
        [BenchEndpoint("stub", url, model="m")],
        options,
    )
    cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
    return {
        "client": "kvroute",
        "ok": result.runs[0].summary.num_ok,
        "req_per_s": n / wall,
        "cpu_us_per_req": cpu / n * 1e6,
    }


def _closed_httpx(url: str, n: int, users: int) -> dict[str, Any]:
    import httpx

    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "q"}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def main() -> int:
        ok = 0
        todo = iter(range(n))
        limits = httpx.Limits(max_connections=users, max_keepalive_connections=users)
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:

            async def user() -> None:
                nonlocal ok
                for _ in todo:
                    first = None
                    async with client.stream(
                        "POST", f"{url}/v1/chat/completions", json=body
                    ) as resp:
                        async for line in resp.aiter_lines():
                            if line.startswith("data: ") and line != "data: [DONE]":
                                chunk = json.loads(line[6:])
                                if (
                                    first is None
                                    and chunk.get("choices")
                                    and chunk["choices"][0]["delta"].get("content")
                                ):
                                    first = time.perf_counter()
                    ok += first is not None

            await asyncio.gather(*(user() for _ in range(users)))
        return ok

    cpu0, t0 = _cpu(), time.perf_counter()
    ok = asyncio.run(main())
    cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
    return {"client": "httpx", "ok": ok, "req_per_s": n / wall, "cpu_us_per_req": cpu / n * 1e6}


def _cpu() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _median_run(fn: Any, repeat: int, key: str) -> dict[str, Any]:
    runs = [fn() for _ in range(repeat)]
    runs.sort(key=lambda r: r[key] if r[key] is not None else float("inf"))
    best = dict(runs[len(runs) // 2])
    best["all_" + key] = [r[key] for r in runs]
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--itl-ms", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["rate1000", "rate200", "variants", "httpx"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.tokens, args.itl_ms)
        return
    from kvroute.engines.local import free_port

    port = free_port()
    stub = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            str(port),
            "--tokens",
            str(args.tokens),
            "--itl-ms",
            str(args.itl_ms),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stub.stdout is not None and stub.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}"
        seconds = 3.0 if args.quick else 10.0
        repeat = 1 if args.quick else args.repeat
        out: dict[str, Any] = {
            "load_average_before": os.getloadavg(),
            "tokens_per_stream": args.tokens,
            "itl_ms": args.itl_ms,
        }
        if args.only in (None, "rate1000"):
            out["rate1000"] = _median_run(
                lambda: _open_loop(url, 1000.0, seconds, args.workers), repeat, "dispatch_p99_ms"
            )
            print("rate1000", out["rate1000"], flush=True)
        if args.only in (None, "rate200"):
            out["rate200"] = _median_run(
                lambda: _open_loop(url, 200.0, seconds, 1), repeat, "dispatch_p99_ms"
            )
            print("rate200", out["rate200"], flush=True)
        if args.only in (None, "variants"):
            out["variants"] = _variants(url, seconds, repeat, args.workers)
            print("variants", json.dumps(out["variants"], indent=1), flush=True)
        if args.only in (None, "httpx"):
            n = 1000 if args.quick else 3000
            out["httpx_vs_kvroute"] = [_closed_kvroute(url, n, 32), _closed_httpx(url, n, 32)]
            print("closed loop", out["httpx_vs_kvroute"], flush=True)
        out["load_average_after"] = os.getloadavg()
        if not args.quick and args.only is None:
            OUT.write_text(json.dumps(out, indent=2) + "\n")
            print(f"wrote {OUT}")
        else:
            print(json.dumps(out, indent=2))
    finally:
        stub.terminate()
        stub.wait(10)


if __name__ == "__main__":
    main()
