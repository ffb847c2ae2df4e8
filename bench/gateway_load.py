"""The load side of the gateway benchmarks: request bodies, one streamed request, the
open- and closed-loop drivers, percentiles, CPU time from /proc, ports."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

HOST = "127.0.0.1"
CHAT_PATH = "/v1/chat/completions"

# -- the load generator -----------------------------------------------------------------


def _body(stream: bool = True, system_chars: int = 0, tag: str = "") -> bytes:
    messages = [{"role": "user", "content": f"Say hello in a few words.{tag}"}]
    if system_chars:
        words = " ".join(f"rule{i % 97} applies" for i in range(system_chars // 14 + 1))
        messages.insert(0, {"role": "system", "content": words[:system_chars]})
    return orjson.dumps({"model": "stub", "messages": messages, "max_tokens": 16, "stream": stream})


async def _one(transport: Any, body: bytes) -> tuple[float, float]:
    from kvroute.http.client import UpstreamRequest

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
    from kvroute.http.client import PooledTransport

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
    from kvroute.http.client import PooledTransport

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
    """CPU seconds of process ``pid``'s main thread and of its other threads (the
    capture worker among them): from ``schedstat`` (nanoseconds on the CPU) where the
    kernel has it, else user + system clock ticks from ``stat`` (10 ms each: ~7 µs per
    request over a 3 s run at 500 req/s, too coarse for a few per cent)."""
    tick = os.sysconf("SC_CLK_TCK")
    main, others = 0.0, 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            try:
                cpu = int((task / "schedstat").read_text().split()[0]) / 1e9
            except FileNotFoundError:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue  # the thread ended
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
