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
``--distinct-prompts`` gives every request its own user message (a number in it, new in
every repeat too), so capture meets a new message each time, as with real users;
without it every request is the same body. ``--cache-aware`` puts both gateways' traffic
through a ``cache_aware`` route over two stub backends: the route tokenizes every prompt
and capture reuses those ids.

Run: ``.venv/bin/python bench/gateway_overhead.py`` (``--quick`` for a short run).
Writes ``bench/gateway_overhead_results.json``. Loopback only; every loop is
bounded in time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from gateway_load import (
    HOST,
    _body,
    _closed_loop,
    _cpu_s,
    _free_port,
    _one,
    _open_loop,
    _pcts,
    _thread_cpu_s,
    _wait_port,
)
from gateway_stub import _run_gateway, _run_stub
from kvroute.gateway.config.capture import CaptureConfig

# gateway_peers.py and gateway_rollout.py import these from here.
__all__ = [
    "HOST",
    "_body",
    "_closed_loop",
    "_cpu_s",
    "_free_port",
    "_one",
    "_open_loop",
    "_pcts",
    "_run_gateway",
    "_run_stub",
    "_thread_cpu_s",
    "_wait_port",
]


def _gateway_config(
    tmp: Path,
    name: str,
    port: int,
    stub_port: int,
    capture: bool,
    cache_aware: bool = False,
    flush_interval_s: float | None = None,
) -> Path:
    """One stub backend; with ``cache_aware``, two (the same stub under two names) behind
    a ``cache_aware`` route, so every prompt is tokenized to route it."""
    flush = "" if flush_interval_s is None else f", flush_interval_s: {flush_interval_s}"
    backends = [
        f"  - {{name: stub, url: 'http://{HOST}:{stub_port}', engine: vllm, models: [stub]}}\n"
    ]
    if cache_aware:
        backends.append(backends[0].replace("name: stub,", "name: stub-2,"))
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"listener: {{host: {HOST}, port: {port}, access_log: false}}\n"
        "backends:\n" + "".join(backends) + "health: {interval_s: 5, scrape_counters: false}\n"
        "limits: {max_in_flight: 4096, max_queue: 4096}\n"
        + ("routes:\n  - {name: all, pool: default, policy: cache_aware}\n" if cache_aware else "")
        + (f"capture: {{directory: '{tmp / name}'{flush}}}\n" if capture else "")
    )
    return config


def _capture_build() -> str:
    """Which build renders capture records here: compiled, or the Python sources and why."""
    try:
        from kvroute._accel import GATEWAY  # kvroute serve enables it (kvroute/__main__.py)

        return GATEWAY.status()[1]
    except ImportError:  # a tree from before kvroute._accel
        pass
    try:
        from kvroute.gateway import native
    except ImportError:  # a tree from before the compiled build
        return "python sources (no compiled build in this tree)"
    return native.status()[1]


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
            args=(
                str(
                    _gateway_config(
                        tmp,
                        name,
                        port,
                        stub_port,
                        name == "on",
                        args.cache_aware,
                        args.flush_interval,
                    )
                ),
                gw_cpu,
            ),
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
        pids = {name: proc.pid for name, proc in gateways.items()}
        runs: list[dict[str, Any]] = []
        for repeat in range(args.repeat):
            # distinct across repeats too: a repeat must not meet the last one's messages
            bodies = [
                _body(system_chars=args.system_chars, tag=f" Request {repeat}.{i}.")
                for i in range(num_bodies)
            ]
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
            # The capture worker's last batches (it wakes every flush interval).
            time.sleep(0.3 + (args.flush_interval or CaptureConfig().flush_interval_s))
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
                    # Latency through each gateway (the capture worker holds the
                    # interpreter lock while it renders a batch).
                    "ttft_ms": {"on": run["gateway"]["ttft_ms"], "off": run["direct"]["ttft_ms"]},
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
            "flush_interval_s": args.flush_interval,
            "cache_aware": args.cache_aware,
            "capture_build": _capture_build(),
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
        "--cache-aware",
        action="store_true",
        help="with --capture-compare: both gateways route by a cache_aware route over two "
        "stub backends, so prompts are tokenized for routing (capture reuses those ids)",
    )
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=None,
        help="capture's flush_interval_s (default: the gateway's own)",
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
