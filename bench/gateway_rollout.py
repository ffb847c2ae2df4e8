"""What shadow mirroring costs the client: a mirrored route and a plain one, side by side.

One gateway (alone on CPU 0) over two stub upstreams (``gateway_overhead.py``'s stub,
sharing CPU 1 with the load generator): ``main``, fast (``--tokens`` chunks
``--token-interval-ms`` apart), and ``cand``, the shadow pool, deliberately slow
(``--shadow-interval-ms`` per chunk) so many copies are in flight at once. Two routes
on the same primary backend: model ``mirrored`` copies every request to ``cand``
(``shadow.share: 1.0``), model ``plain`` has no shadow. The load generator sends
``--rate`` streamed req/s to each, at the same moments, alternating which goes
first, for ``--seconds``, ``--repeat`` times. Reported: client TTFT and E2E
percentiles of each route and their difference (mirrored − plain; the median of the
repeats); the gateway's CPU per client request with the shadow on and, after a
reload (SIGHUP) to the same config without it, off (half the client requests are
mirrored, so "on" carries one copy per two client requests); and the gateway's own
comparison view (``/kvroute/rollout``) at the end.

Run: ``.venv/bin/python bench/gateway_rollout.py`` (``--quick`` for a short run).
Writes ``bench/gateway_rollout_results.json``. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from gateway_overhead import (
    HOST,
    _cpu_s,
    _free_port,
    _one,
    _pcts,
    _run_gateway,
    _run_stub,
    _wait_port,
)

ROUTES = ("mirrored", "plain")


def _body(model: str) -> bytes:
    messages = [{"role": "user", "content": "Say hello in a few words."}]
    return orjson.dumps({"model": model, "messages": messages, "max_tokens": 16, "stream": True})


async def _open_loop(url: str, rate: float, seconds: float) -> dict[str, Any]:
    from kvroute.http.client import PooledTransport

    transport = PooledTransport(url)
    bodies = {name: _body(name) for name in ROUTES}
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in ROUTES}
    errors = dict.fromkeys(ROUTES, 0)

    async def fire(name: str) -> None:
        try:
            results[name].append(await _one(transport, bodies[name]))
        except Exception:
            errors[name] += 1

    await asyncio.gather(*(fire(n) for n in ROUTES for _ in range(10)))  # warm-up
    for v in results.values():
        v.clear()
    tasks: list[asyncio.Task[None]] = []
    interval, start = 1.0 / rate, time.perf_counter()
    for i in range(int(rate * seconds)):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        for name in ROUTES if i % 2 else reversed(ROUTES):
            tasks.append(asyncio.get_running_loop().create_task(fire(name)))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    await transport.aclose()
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - start, 2)}
    for name, samples in results.items():
        out[name] = {
            "requests": len(samples),
            "errors": errors[name],
            "ttft_ms": _pcts(sorted(s[0] for s in samples)),
            "e2e_ms": _pcts(sorted(s[1] for s in samples)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="req/s to each route")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--token-interval-ms", type=float, default=1.0)
    parser.add_argument("--shadow-interval-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="2 s phases, 1 repeat")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).with_name("gateway_rollout_results.json")
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.repeat = 2.0, 1
    ctx = mp.get_context("spawn")
    main_port, cand_port, gw_port = _free_port(), _free_port(), _free_port()
    stubs = [
        ctx.Process(
            target=_run_stub,
            args=(port, args.tokens, interval_ms / 1000, 1),
            daemon=True,
        )
        for port, interval_ms in (
            (main_port, args.token_interval_ms),
            (cand_port, args.shadow_interval_ms),
        )
    ]
    config_with = (
        f"listener: {{host: {HOST}, port: {gw_port}, access_log: false}}\n"
        "backends:\n"
        f"  - {{name: main-1, url: 'http://{HOST}:{main_port}', engine: vllm, pool: main}}\n"
        f"  - {{name: cand-1, url: 'http://{HOST}:{cand_port}', engine: vllm, pool: cand}}\n"
        "health: {interval_s: 60}\n"
        "routes:\n"
        "  - {name: mirrored, match: {model: mirrored}, pool: main,\n"
        "     shadow: {pool: cand, share: 1.0, max_in_flight: 1024}}\n"
        "  - {name: plain, match: {model: plain}, pool: main}\n"
    )
    config_without = config_with.replace(
        "pool: main,\n     shadow: {pool: cand, share: 1.0, max_in_flight: 1024}}", "pool: main}"
    )
    assert config_without != config_with
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "gw.yaml")
        path.write_text(config_with)
        gateway = ctx.Process(target=_run_gateway, args=(str(path), 0), daemon=True)
        for p in (*stubs, gateway):
            p.start()
        try:
            for port in (main_port, cand_port, gw_port):
                _wait_port(port)
            os.sched_setaffinity(0, {1})
            assert gateway.pid is not None
            runs, cpu_off = [], []
            for _ in range(args.repeat):
                for shadow_on in (True, False):  # reload (SIGHUP) between the two
                    path.write_text(config_with if shadow_on else config_without)
                    os.kill(gateway.pid, signal.SIGHUP)
                    time.sleep(0.5)
                    cpu_before = sum(_cpu_s(gateway.pid))
                    url = f"http://{HOST}:{gw_port}"
                    run = asyncio.run(_open_loop(url, args.rate, args.seconds))
                    time.sleep(args.shadow_interval_ms * args.tokens / 1000 + 0.5)  # copies end
                    num_client = sum(run[name]["requests"] for name in ROUTES)
                    cpu_us = (sum(_cpu_s(gateway.pid)) - cpu_before) / max(1, num_client) * 1e6
                    run["gateway_cpu_us_per_client_request"] = round(cpu_us, 1)
                    run["shadow"] = shadow_on
                    print(json.dumps(run), flush=True)
                    if shadow_on:
                        runs.append(run)
                        view = _get_json(f"{url}/kvroute/rollout")
                    else:
                        cpu_off.append(cpu_us)
        finally:
            for p in (*stubs, gateway):
                if p.pid is not None and p.is_alive():
                    os.kill(p.pid, signal.SIGTERM)
                p.join(10)
    added = {
        metric: {
            p: round(
                statistics.median(r["mirrored"][metric][p] - r["plain"][metric][p] for r in runs),
                3,
            )
            for p in ("p50", "p90", "p99")
        }
        for metric in ("ttft_ms", "e2e_ms")
    }
    cpu = {
        "shadow_on_median": round(
            statistics.median(r["gateway_cpu_us_per_client_request"] for r in runs), 1
        ),
        "shadow_off_median": round(statistics.median(cpu_off), 1),
    }
    result = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "load_average": os.getloadavg(),
        "runs": runs,
        "added_by_mirroring_ms_median": added,
        "gateway_cpu_us_per_client_request": cpu,
        "rollout_view": view,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"added_by_mirroring_ms_median": added, "gateway_cpu_us": cpu}, indent=1))


def _get_json(url: str) -> Any:
    import httpx

    return httpx.get(url, timeout=10).json()


if __name__ == "__main__":
    main()
