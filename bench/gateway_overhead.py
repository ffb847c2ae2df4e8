"""What the gateway adds: latency and throughput against the same fast stub upstream.

Three processes, pinned so they do not steal each other's core:

- a stub OpenAI upstream (raw asyncio): answers every POST (a chat completion) with a
  stream of ``--tokens`` chunks, ``--token-interval-ms`` apart, plus the usage chunk
  when asked, then ``[DONE]``; GETs of ``/health``, ``/v1/models`` and sglang's
  ``/get_model_info`` / ``/get_server_info`` get small fixed JSON answers (the
  routers compared in ``gateway_peers.py`` probe them);
- the gateway (``kvroute.gateway``, uvloop), alone on CPU 0, in front of the stub;
- the load generator, sharing CPU 1 with the stub.

Phase 1 (open loop): ``--rate`` streamed requests per second to the gateway and, in
the same run, the same rate straight to the stub, interleaved, for ``--seconds``. The
added latency is the difference of percentiles (TTFT: first body bytes; E2E: last).
Repeated ``--repeat`` times; the median of each added percentile is reported, since
a shared machine's neighbours move single runs a lot. The gateway's CPU time per
request (user and system, from /proc) is the figure least moved by neighbours.
Phase 2 (closed loop): ``--concurrency`` clients as fast as they can, gateway then
direct: the maximum sustained rate.

``--capture-compare`` measures what capture costs instead: two gateways on the
gateway core, the same config but one with a ``capture:`` section, get the same
open-loop rate interleaved request by request (no direct target), ``--repeat`` times;
the figure is each one's CPU per request (all threads, from /proc) and their ratio.
``--distinct-prompts`` gives every request its own user message (a number in it), so
capture meets a new message each time, as with real users; without it every request
is the same body.

Run: ``.venv/bin/python bench/gateway_overhead.py`` (``--quick`` for a short run).
Writes ``bench/gateway_overhead_results.json``. Loopback only; every loop is
bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httptools
import orjson

HOST = "127.0.0.1"
CHAT_PATH = "/v1/chat/completions"


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
    import uvloop

    from kvroute.gateway.app import Gateway
    from kvroute.gateway.config import load_config
    from kvroute.gateway.service import serve_until_signalled

    config = load_config(Path(config_path))
    uvloop.run(serve_until_signalled(Gateway(config, config_path=Path(config_path))))


# -- the load generator -----------------------------------------------------------------


def _body(stream: bool = True, system_chars: int = 0, tag: str = "") -> bytes:
    messages = [{"role": "user", "content": f"Say hello in a few words.{tag}"}]
    if system_chars:
        words = " ".join(f"rule{i % 97} applies" for i in range(system_chars // 14 + 1))
        messages.insert(0, {"role": "system", "content": words[:system_chars]})
    return orjson.dumps({"model": "stub", "messages": messages, "max_tokens": 16, "stream": stream})


async def _one(transport: Any, body: bytes) -> tuple[float, float]:
    from kvroute.gateway.upstream import UpstreamRequest

    t0 = time.perf_counter()
    exchange = await transport.send(
        UpstreamRequest("POST", CHAT_PATH, (("content-type", "application/json"),), body),
        connect_timeout_s=5.0,
        head_timeout_s=10.0,
    )
    ttft = 0.0
    while True:
        data = await exchange.read(10.0)
        if data is None:
            break
        if not ttft and data:
            ttft = time.perf_counter() - t0
    if exchange.status != 200:
        raise RuntimeError(f"HTTP {exchange.status}")
    return ttft, time.perf_counter() - t0


async def _open_loop(
    gw_url: str,
    direct_url: str,
    rate: float,
    seconds: float,
    body: bytes,
    bodies: list[bytes] | None = None,
) -> dict[str, Any]:
    """``bodies``: send ``bodies[i % len(bodies)]`` as the i-th request (else ``body``)."""
    from kvroute.gateway.upstream import PooledTransport

    targets = {"gateway": PooledTransport(gw_url), "direct": PooledTransport(direct_url)}
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in targets}
    errors: dict[str, int] = dict.fromkeys(targets, 0)
    tasks: list[asyncio.Task[None]] = []

    async def fire(name: str, data: bytes = body) -> None:
        try:
            results[name].append(await _one(targets[name], data))
        except Exception:
            errors[name] += 1

    # warm-up: open connections
    await asyncio.gather(*(fire(n) for n in targets for _ in range(20)))
    for v in results.values():
        v.clear()
    interval = 1.0 / rate
    start = time.perf_counter()
    n = int(rate * seconds)
    late = 0
    for i in range(n):
        due = start + i * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            late += 1
        # both targets at the same moment, alternating which goes first
        order = ("gateway", "direct") if i % 2 else ("direct", "gateway")
        data = bodies[i % len(bodies)] if bodies else body
        for name in order:
            tasks.append(asyncio.get_running_loop().create_task(fire(name, data)))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    elapsed = time.perf_counter() - start
    out: dict[str, Any] = {
        "rate_per_target": rate,
        "seconds": round(elapsed, 2),
        "late_sends": late,
    }
    for name, samples in results.items():
        ttfts = sorted(s[0] for s in samples)
        e2es = sorted(s[1] for s in samples)
        out[name] = {
            "requests": len(samples),
            "errors": errors[name],
            "ttft_ms": _pcts(ttfts),
            "e2e_ms": _pcts(e2es),
        }
    out["added_ms"] = {
        metric: {
            p: round(out["gateway"][metric][p] - out["direct"][metric][p], 3)
            for p in ("p50", "p90", "p99")
        }
        for metric in ("ttft_ms", "e2e_ms")
    }
    for t in targets.values():
        await t.aclose()
    return out


async def _closed_loop(url: str, concurrency: int, seconds: float, body: bytes) -> dict[str, Any]:
    from kvroute.gateway.upstream import PooledTransport

    transport = PooledTransport(url)
    done = 0
    errors = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, errors
        while time.perf_counter() < stop_at:
            try:
                await _one(transport, body)
                done += 1
            except Exception:
                errors += 1

    await asyncio.gather(*(_one(transport, body) for _ in range(concurrency)))
    start = time.perf_counter()
    stop_at = start + seconds
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), seconds + 30)
    elapsed = time.perf_counter() - start
    await transport.aclose()
    return {
        "concurrency": concurrency,
        "requests": done,
        "errors": errors,
        "req_per_s": round(done / elapsed, 1),
    }


def _pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "mean": float("nan")}

    def pct(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)

    return {
        "p50": pct(0.5),
        "p90": pct(0.9),
        "p99": pct(0.99),
        "mean": round(statistics.fmean(values) * 1000, 3),
    }


def _cpu_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _thread_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of process ``pid``'s main thread and of its other
    threads (the capture worker among them)."""
    tick = os.sysconf("SC_CLK_TCK")
    main, others = 0.0, 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        cpu = (int(fields[11]) + int(fields[12])) / tick
        if task.name == str(pid):
            main += cpu
        else:
            others += cpu
    return main, others


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _gateway_config(tmp: Path, name: str, port: int, stub_port: int, capture: bool) -> Path:
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"listener: {{host: {HOST}, port: {port}, access_log: false}}\n"
        f"backends:\n  - {{name: stub, url: 'http://{HOST}:{stub_port}', engine: vllm, models: [stub]}}\n"
        "health: {interval_s: 5, scrape_counters: false}\n"
        "limits: {max_in_flight: 4096, max_queue: 4096}\n"
        + (f"capture: {{directory: '{tmp / name}'}}\n" if capture else "")
    )
    return config


def _capture_compare(args: argparse.Namespace) -> None:
    """Capture on vs off: two gateways, the same interleaved open-loop traffic."""
    cpus = sorted(os.sched_getaffinity(0))
    gw_cpu, other_cpu = cpus[0], cpus[-1]
    stub_port, off_port, on_port = _free_port(), _free_port(), _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="kvroute-bench-"))
    ctx = mp.get_context("spawn")
    interval_s = args.token_interval_ms / 1000
    stub = ctx.Process(
        target=_run_stub, args=(stub_port, args.tokens, interval_s, other_cpu), daemon=True
    )
    gateways = {
        name: ctx.Process(
            target=_run_gateway,
            args=(str(_gateway_config(tmp, name, port, stub_port, name == "on")), gw_cpu),
            daemon=True,
        )
        for name, port in (("off", off_port), ("on", on_port))
    }
    stub.start()
    for proc in gateways.values():
        proc.start()
    try:
        for port in (stub_port, off_port, on_port):
            _wait_port(port)
        os.sched_setaffinity(0, {other_cpu})
        import uvloop

        num_bodies = int(args.rate * args.seconds) + 64 if args.distinct_prompts else 0
        bodies = [
            _body(system_chars=args.system_chars, tag=f" Request {i}.") for i in range(num_bodies)
        ]
        pids = {name: proc.pid for name, proc in gateways.items()}
        runs: list[dict[str, Any]] = []
        for _ in range(args.repeat):
            before = {name: _thread_cpu_s(pid) for name, pid in pids.items() if pid is not None}
            run = uvloop.run(
                _open_loop(
                    f"http://{HOST}:{on_port}",
                    f"http://{HOST}:{off_port}",
                    args.rate,
                    args.seconds,
                    _body(system_chars=args.system_chars),
                    bodies or None,
                )
            )
            time.sleep(0.5)  # the capture worker's last batches (flush interval 0.2 s)
            cpu_us: dict[str, float] = {}
            threads_us: dict[str, dict[str, float]] = {}
            for name, target in (("on", "gateway"), ("off", "direct")):
                pid = pids[name]
                assert pid is not None
                main_s, others_s = _thread_cpu_s(pid)
                n = run[target]["requests"] + 20  # + warm-up
                main_us = (main_s - before[name][0]) / n * 1e6
                others_us = (others_s - before[name][1]) / n * 1e6
                cpu_us[name] = main_us + others_us
                threads_us[name] = {
                    "main_thread": round(main_us, 1),
                    "other_threads": round(others_us, 1),
                }
            runs.append(
                {
                    "cpu_us_per_request": {k: round(v, 1) for k, v in cpu_us.items()},
                    "cpu_us_per_request_by_thread": threads_us,
                    "capture_cpu_ratio": round(cpu_us["on"] / cpu_us["off"], 4),
                    "requests": {
                        "on": run["gateway"]["requests"],
                        "off": run["direct"]["requests"],
                    },
                    "errors": {"on": run["gateway"]["errors"], "off": run["direct"]["errors"]},
                    "loadavg": os.getloadavg(),
                }
            )
        ratios = [r["capture_cpu_ratio"] for r in runs]
        result = {
            "mode": "capture_compare",
            "rate_per_gateway": args.rate,
            "seconds": args.seconds,
            "system_chars": args.system_chars,
            "distinct_prompts": args.distinct_prompts,
            "runs": runs,
            "capture_cpu_ratio_median": statistics.median(ratios),
            "capture_cpu_overhead_pct_median": round((statistics.median(ratios) - 1) * 100, 2),
        }
    finally:
        for proc in (*gateways.values(), stub):
            proc.terminate()
            proc.join(10)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    json.dump(result, sys.stdout, indent=2)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="req/s to each target")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--token-interval-ms", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3, help="open-loop runs (median reported)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--closed-seconds", type=float, default=5.0)
    parser.add_argument("--access-log", action="store_true", help="gateway writes its access log")
    parser.add_argument("--quick", action="store_true", help="3 s phases")
    parser.add_argument(
        "--capture", action="store_true", help="gateway captures traffic (capture: section)"
    )
    parser.add_argument(
        "--system-chars", type=int, default=0, help="add a system prompt of this many chars"
    )
    parser.add_argument(
        "--capture-compare",
        action="store_true",
        help="gateway with capture vs the same gateway without, interleaved (CPU per request)",
    )
    parser.add_argument(
        "--distinct-prompts", action="store_true", help="a different user message per request"
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).with_name("gateway_overhead_results.json"))
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.closed_seconds = 3.0, 3.0
    if args.capture_compare:
        _capture_compare(args)
        return
    cpus = sorted(os.sched_getaffinity(0))
    gw_cpu, other_cpu = cpus[0], cpus[-1]
    stub_port, gw_port = _free_port(), _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="kvroute-bench-"))
    config = tmp / "gateway.yaml"
    config.write_text(
        f"listener: {{host: {HOST}, port: {gw_port}, access_log: {str(args.access_log).lower()}}}\n"
        f"backends:\n  - {{name: stub, url: 'http://{HOST}:{stub_port}', engine: vllm, models: [stub]}}\n"
        "health: {interval_s: 5, scrape_counters: false}\n"
        "limits: {max_in_flight: 4096, max_queue: 4096}\n"
        + (f"capture: {{directory: '{tmp / 'capture'}'}}\n" if args.capture else "")
    )
    ctx = mp.get_context("spawn")
    interval_s = args.token_interval_ms / 1000
    stub = ctx.Process(
        target=_run_stub, args=(stub_port, args.tokens, interval_s, other_cpu), daemon=True
    )
    gateway = ctx.Process(target=_run_gateway, args=(str(config), gw_cpu), daemon=True)
    stub.start()
    gateway.start()
    try:
        _wait_port(stub_port)
        _wait_port(gw_port)
        os.sched_setaffinity(0, {other_cpu})
        import uvloop

        gw_url, direct_url = f"http://{HOST}:{gw_port}", f"http://{HOST}:{stub_port}"
        body = _body(system_chars=args.system_chars)
        result: dict[str, Any] = {
            "machine": {
                "cpus": len(cpus),
                "gateway_cpu": gw_cpu,
                "load_and_stub_cpu": other_cpu,
                "loadavg": os.getloadavg(),
            },
            "stub": {"tokens": args.tokens, "token_interval_ms": args.token_interval_ms},
            "gateway_access_log": args.access_log,
            "gateway_capture": args.capture,
            "system_chars": args.system_chars,
        }
        assert gateway.pid is not None
        cpu0 = _cpu_s(gateway.pid)
        runs = [
            uvloop.run(_open_loop(gw_url, direct_url, args.rate, args.seconds, body))
            for _ in range(args.repeat)
        ]
        cpu1 = _cpu_s(gateway.pid)
        result["open_loop_runs"] = runs
        result["open_loop"] = runs[0]
        result["added_ms_median_of_runs"] = {
            metric: {
                p: statistics.median(r["added_ms"][metric][p] for r in runs)
                for p in ("p50", "p90", "p99")
            }
            for metric in ("ttft_ms", "e2e_ms")
        }
        result["closed_loop_gateway"] = uvloop.run(
            _closed_loop(gw_url, args.concurrency, args.closed_seconds, body)
        )
        cpu2 = _cpu_s(gateway.pid)
        n_open = sum(r["gateway"]["requests"] + 20 for r in runs)  # + warm-up
        n_closed = result["closed_loop_gateway"]["requests"] + args.concurrency
        result["gateway_cpu_us_per_request"] = {
            phase: {
                "user": round((b[0] - a[0]) / n * 1e6, 1),
                "system": round((b[1] - a[1]) / n * 1e6, 1),
            }
            for phase, a, b, n in (
                ("open_loop", cpu0, cpu1, n_open),
                ("closed_loop", cpu1, cpu2, n_closed),
            )
        }
        result["closed_loop_direct"] = uvloop.run(
            _closed_loop(direct_url, args.concurrency, args.closed_seconds, body)
        )
    finally:
        for proc in (gateway, stub):
            proc.terminate()
            proc.join(10)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
