"""`kvroute serve` against its peers: the same stub fronted by kvroute, LiteLLM, sglang-router.

Reuses ``gateway_overhead.py`` (the stub upstream, the open- and closed-loop load
generators, the /proc CPU reading). One stub on CPU 1 with the load generator; each
front (kvroute's gateway, the LiteLLM proxy, sglang-router) in turn alone on CPU 0 --
the same core for each, started, measured and stopped before the next starts.

Per front: a warm-up; phase 2 first (closed loop, ``--concurrency`` clients, the
maximum sustained req/s); then phase 1 (open loop) at each ``--rates`` value, the
front and the stub directly interleaved at the same rate, ``--repeat`` runs, medians
reported. A rate above 2x the front's closed-loop maximum is run once, shorter, and
flagged ``overloaded``. Each rate is marked ``sustained`` when the front completed
>= 95 % of the offered rate with no errors; otherwise read its achieved rate
(completed requests / time, drain included) and errors, not its latency. The front's
CPU time (its whole process tree, from /proc) per request in the closed loop is
reported too, with ``1e6 / that`` as the rate one whole core would carry: on 2 cores
the stub and the load generator share the other core, so a fast front's closed-loop
rate is capped by that core, not by the front.

The peers are installed from PyPI into throwaway virtualenvs under
``/tmp/kvroute-bench/`` (never into the project's venv)::

    python3 -m venv /tmp/kvroute-bench/litellm-venv
    /tmp/kvroute-bench/litellm-venv/bin/pip install 'litellm[proxy]'
    python3 -m venv /tmp/kvroute-bench/sglr-venv
    /tmp/kvroute-bench/sglr-venv/bin/pip install sglang-router

Run: ``.venv/bin/python bench/gateway_peers.py``. A peer whose venv is missing or
that does not start is reported with the reason and skipped. LiteLLM runs with no
database, no master key, telemetry off and the local model-cost map (no fetch).
``LITELLM_BENCH_MODEL`` (default ``openai/stub``) sets LiteLLM's backend model name;
``SGLR_EXTRA_ARGS`` adds flags to sglang-router's command line.
Writes ``bench/gateway_peers_results.json``. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from gateway_overhead import (
    HOST,
    _body,
    _closed_loop,
    _free_port,
    _open_loop,
    _run_gateway,
    _run_stub,
    _wait_port,
)

BENCH_DIR = Path("/tmp/kvroute-bench")
LITELLM_VENV = BENCH_DIR / "litellm-venv"
SGLR_VENV = BENCH_DIR / "sglr-venv"


def _tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(k) for k in kids)
        except OSError:
            pass
    return out


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in _tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _exited(proc: Any) -> bool:
    return proc.poll() is not None if hasattr(proc, "poll") else not proc.is_alive()


def _wait_ready(url_port: int, proc: Any, timeout_s: float, body: bytes) -> None:
    """The port listens and one streamed chat completion succeeds through it."""
    from gateway_overhead import _one
    from kvroute.http.client import PooledTransport

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _exited(proc):
            raise RuntimeError("exited during start-up (see log_tail)")
        try:
            _wait_port(url_port, 0.5)
            break
        except RuntimeError:
            pass
    last: Exception | None = None
    while time.monotonic() < deadline:
        if _exited(proc):
            raise RuntimeError("exited during start-up (see log_tail)")

        async def probe() -> None:
            t = PooledTransport(f"http://{HOST}:{url_port}")
            try:
                await _one(t, body)
            finally:
                await t.aclose()

        try:
            asyncio.run(probe())
            return
        except Exception as e:
            last = e
            time.sleep(0.5)
    raise RuntimeError(f"no successful completion within {timeout_s} s: {last!r}")


class _Front:
    """A started front: the handle to stop it and the pid whose tree is measured."""

    def __init__(self, name: str, pid: int, port: int, stop: Any, proc: Any) -> None:
        self.name, self.pid, self.port, self.stop, self.proc = name, pid, port, stop, proc


def _start_popen(
    name: str, argv: list[str], env: dict[str, str], cpu: int, log: Path, port: int
) -> _Front:
    with log.open("wb") as f:
        proc = subprocess.Popen(
            ["taskset", "-c", str(cpu), *argv],  # every thread and child on that core
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own session: only what it spawned
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    return _Front(name, proc.pid, port, stop, proc)


def start_kvroute(tmp: Path, stub_port: int, cpu: int) -> _Front:
    port = _free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"listener: {{host: {HOST}, port: {port}, access_log: false}}\n"
        f"backends:\n  - {{name: stub, url: 'http://{HOST}:{stub_port}', engine: vllm, models: [stub]}}\n"
        "health: {interval_s: 5, scrape_counters: false}\n"
        "limits: {max_in_flight: 4096, max_queue: 4096}\n"
    )
    proc = mp.get_context("spawn").Process(
        target=_run_gateway, args=(str(config), cpu), daemon=True
    )
    proc.start()

    def stop() -> None:
        proc.terminate()
        proc.join(10)

    assert proc.pid is not None
    return _Front("kvroute", proc.pid, port, stop, proc)


def start_kvroute_tree(tree: Path, tmp: Path, stub_port: int, cpu: int) -> _Front:
    """``kvroute serve`` from another checkout (its ``.venv``, so its code): before vs
    after, side by side. Started like a peer, as ``kvroute serve`` runs in production."""
    port = _free_port()
    config = tmp / f"gateway-{tree.name}.yaml"
    config.write_text(
        f"listener: {{host: {HOST}, port: {port}, access_log: false}}\n"
        f"backends:\n  - {{name: stub, url: 'http://{HOST}:{stub_port}', engine: vllm, models: [stub]}}\n"
        "health: {interval_s: 5, scrape_counters: false}\n"
        "limits: {max_in_flight: 4096, max_queue: 4096}\n"
    )
    python = str(tree / ".venv" / "bin" / "python")
    argv = [python, "-c", "from kvroute.cli.serve import serve_cmd; serve_cmd()"]
    name = f"kvroute@{tree}"
    log = tmp / f"kvroute-{tree.name}.log"
    return _start_popen(name, [*argv, "--config", str(config)], dict(os.environ), cpu, log, port)


def _quiet_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.pop("DATABASE_URL", None)
    env.update(
        {
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "DISABLE_ADMIN_UI": "True",
            # no auth, like the kvroute gateway here (loopback only); without this
            # LiteLLM refuses to start with no master key
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",  # sglang-router otherwise tries to fetch a tokenizer
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "NO_PROXY": "*",
            "no_proxy": "*",
        }
    )
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(k, None)
    return env


def start_litellm(tmp: Path, stub_port: int, cpu: int) -> _Front:
    exe = LITELLM_VENV / "bin" / "litellm"
    if not exe.exists():
        raise RuntimeError(f"{exe} missing (install: see this script's docstring)")
    port = _free_port()
    config = tmp / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: stub\n"
        "    litellm_params:\n"
        f"      model: {os.environ.get('LITELLM_BENCH_MODEL', 'openai/stub')}\n"
        f"      api_base: http://{HOST}:{stub_port}/v1\n"
        "      api_key: dummy\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
        "  set_verbose: false\n"
        "  request_timeout: 60\n"
        "general_settings:\n"
        "  disable_spend_logs: true\n"
        "  disable_error_logs: true\n"
    )
    # uvicorn's per-request access log off, as kvroute's is here (access_log: false)
    log_config = tmp / "litellm-logging.json"
    log_config.write_text(
        json.dumps(
            {
                "version": 1,
                "disable_existing_loggers": False,
                "loggers": {"uvicorn.access": {"level": "WARNING"}},
            }
        )
    )
    argv = [str(exe), "--config", str(config), "--host", HOST, "--port", str(port)]
    argv += ["--num_workers", "1", "--telemetry", "False", "--log_config", str(log_config)]
    return _start_popen("litellm", argv, _quiet_env(), cpu, tmp / "litellm.log", port)


def start_sglang_router(tmp: Path, stub_port: int, cpu: int) -> _Front:
    py = SGLR_VENV / "bin" / "python"
    if not py.exists():
        raise RuntimeError(f"{py} missing (install: see this script's docstring)")
    port = _free_port()
    argv = [str(py), "-m", "sglang_router.launch_router"]
    argv += ["--worker-urls", f"http://{HOST}:{stub_port}", "--host", HOST, "--port", str(port)]
    argv += ["--policy", "round_robin", "--log-level", "warn"]
    argv += ["--prometheus-host", HOST, "--prometheus-port", str(_free_port())]
    argv += ["--worker-startup-timeout-secs", "60"]
    argv += os.environ.get("SGLR_EXTRA_ARGS", "").split()
    env = _quiet_env()
    env["RUST_LOG"] = "warn"
    return _start_popen("sglang-router", argv, env, cpu, tmp / "sglang-router.log", port)


STARTERS = {
    "kvroute": start_kvroute,
    "litellm": start_litellm,
    "sglang-router": start_sglang_router,
}


def _median_pcts(runs: list[dict[str, Any]], who: str, metric: str) -> dict[str, float]:
    return {
        p: round(statistics.median(r[who][metric][p] for r in runs), 3)
        for p in ("p50", "p90", "p99")
    }


def _open_runs(url: str, direct: str, rate: float, seconds: float, repeat: int, body: bytes):
    import uvloop

    runs = []
    for _ in range(repeat):
        try:
            runs.append(uvloop.run(_open_loop(url, direct, rate, seconds, body)))
        except Exception as e:
            runs.append({"failed": repr(e)})
    ok = [r for r in runs if "failed" not in r]
    if not ok:
        return {"rate": rate, "runs": runs, "failed": True}
    summary: dict[str, Any] = {"rate": rate, "runs_ok": len(ok), "runs": runs}
    for who in ("gateway", "direct"):
        summary["front" if who == "gateway" else "direct"] = {
            "ttft_ms": _median_pcts(ok, who, "ttft_ms"),
            "e2e_ms": _median_pcts(ok, who, "e2e_ms"),
            "achieved_req_per_s": round(
                statistics.median(r[who]["requests"] / r["seconds"] for r in ok), 1
            ),
            "errors": sum(r[who]["errors"] for r in ok),
        }
    summary["added_ms"] = {
        m: {
            p: round(statistics.median(r["added_ms"][m][p] for r in ok), 3)
            for p in ("p50", "p90", "p99")
        }
        for m in ("ttft_ms", "e2e_ms")
    }
    return summary


def measure(front: _Front, direct_url: str, args: argparse.Namespace, body: bytes) -> dict:
    import uvloop

    url = f"http://{HOST}:{front.port}"
    out: dict[str, Any] = {}
    # warm-up (lazy imports, connection pools), not counted
    uvloop.run(_closed_loop(url, 8, 1.0, body))
    c0 = _tree_cpu_s(front.pid)
    closed = uvloop.run(_closed_loop(url, args.concurrency, args.closed_seconds, body))
    c1 = _tree_cpu_s(front.pid)
    n = closed["requests"] + args.concurrency
    closed["cpu_us_per_request"] = round((c1 - c0) / max(n, 1) * 1e6, 1)
    out["closed_loop"] = closed
    out["open_loop"] = {}
    for rate in args.rates:
        overloaded = rate > 2.0 * closed["req_per_s"]
        if overloaded:
            r = _open_runs(url, direct_url, rate, args.overload_seconds, 1, body)
        else:
            r = _open_runs(url, direct_url, rate, args.seconds, args.repeat, body)
        r["overloaded"] = overloaded
        r["sustained"] = not r.get("failed") and (
            r["front"]["achieved_req_per_s"] >= 0.95 * rate and r["front"]["errors"] == 0
        )
        out["open_loop"][str(int(rate))] = r
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 100.0, 500.0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per open-loop run")
    parser.add_argument("--overload-seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--closed-seconds", type=float, default=4.0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--token-interval-ms", type=float, default=1.0)
    parser.add_argument("--fronts", nargs="*", default=list(STARTERS), choices=list(STARTERS))
    parser.add_argument(
        "--kvroute-trees",
        nargs="*",
        type=Path,
        default=[],
        help="checkouts whose `kvroute serve` (TREE/.venv/bin/python) are measured too, "
        "in this order, after --fronts: before vs after in one run (give --fronts "
        "nothing to measure only these)",
    )
    parser.add_argument("--start-timeout", type=float, default=150.0)
    parser.add_argument(
        "--out", default=str(Path(__file__).with_name("gateway_peers_results.json"))
    )
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    front_cpu, other_cpu = cpus[0], cpus[-1]
    tmp = Path(tempfile.mkdtemp(prefix="peers-", dir=BENCH_DIR if BENCH_DIR.is_dir() else None))
    stub_port = _free_port()
    stub = mp.get_context("spawn").Process(
        target=_run_stub,
        args=(stub_port, args.tokens, args.token_interval_ms / 1000, other_cpu),
        daemon=True,
    )
    stub.start()
    body = _body()
    direct_url = f"http://{HOST}:{stub_port}"
    result: dict[str, Any] = {
        "machine": {
            "cpus": len(cpus),
            "front_cpu": front_cpu,
            "load_and_stub_cpu": other_cpu,
            "loadavg_start": os.getloadavg(),
        },
        "stub": {"tokens": args.tokens, "token_interval_ms": args.token_interval_ms},
        "args": {k: v for k, v in vars(args).items() if k not in {"out", "kvroute_trees"}}
        | {"kvroute_trees": [str(t) for t in args.kvroute_trees]},
        "versions": {},
        "fronts": {},
    }
    for venv, pkg in ((LITELLM_VENV, "litellm"), (SGLR_VENV, "sglang-router")):
        try:
            result["versions"][pkg] = subprocess.run(
                [
                    str(venv / "bin" / "python"),
                    "-c",
                    f"import importlib.metadata as m; print(m.version('{pkg}'))",
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
        except Exception as e:
            result["versions"][pkg] = f"unavailable: {e!r}"
    try:
        _wait_port(stub_port)
        os.sched_setaffinity(0, {other_cpu})
        import uvloop

        result["direct_closed_loop"] = uvloop.run(
            _closed_loop(direct_url, args.concurrency, args.closed_seconds, body)
        )
        trees = {f"kvroute@{t}": t for t in args.kvroute_trees}
        for name in [*args.fronts, *trees]:
            t0 = time.monotonic()
            print(f"== {name}", file=sys.stderr, flush=True)
            front = None
            try:
                if name in trees:
                    front = start_kvroute_tree(trees[name], tmp, stub_port, front_cpu)
                else:
                    front = STARTERS[name](tmp, stub_port, front_cpu)
                _wait_ready(front.port, front.proc, args.start_timeout, body)
                startup = round(time.monotonic() - t0, 1)
                r = measure(front, direct_url, args, body)
                r["startup_s"] = startup
                result["fronts"][name] = r
            except Exception as e:
                log = tmp / f"{name}.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                result["fronts"][name] = {"failed": repr(e), "log_tail": tail}
            finally:
                if front is not None:
                    front.stop()
            print(
                json.dumps(result["fronts"][name].get("closed_loop", result["fronts"][name]))[:600],
                file=sys.stderr,
                flush=True,
            )
    finally:
        stub.terminate()
        stub.join(10)
    result["machine"]["loadavg_end"] = os.getloadavg()
    result["summary"] = _summary(result)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    json.dump(result["summary"], sys.stdout, indent=2)
    print()


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {
        "max_req_per_s": {"direct": result.get("direct_closed_loop", {}).get("req_per_s")}
    }
    for name, r in result["fronts"].items():
        if "failed" in r:
            s.setdefault("failed", {})[name] = r["failed"]
            continue
        s["max_req_per_s"][name] = r["closed_loop"]["req_per_s"]
        cpu_us = r["closed_loop"]["cpu_us_per_request"]
        s.setdefault("cpu_us_per_request", {})[name] = cpu_us
        # what one whole core would carry at that cost: the front's own ceiling, which
        # the closed loop cannot reach when the stub + load generator's core saturates
        s.setdefault("one_core_req_per_s_from_cpu", {})[name] = (
            round(1e6 / cpu_us, 1) if cpu_us else None
        )
        for rate, o in r["open_loop"].items():
            row = s.setdefault(f"open_loop_{rate}", {})
            if o.get("failed"):
                row[name] = "failed"
                continue
            row[name] = {
                "ttft_ms": {p: o["front"]["ttft_ms"][p] for p in ("p50", "p99")},
                "e2e_ms": {p: o["front"]["e2e_ms"][p] for p in ("p50", "p99")},
                "achieved_req_per_s": o["front"]["achieved_req_per_s"],
                "errors": o["front"]["errors"],
                "overloaded": o["overloaded"],
                "sustained": o["sustained"],
            }
            row.setdefault(
                f"direct_paired_with_{name}",
                {
                    "ttft_ms": {p: o["direct"]["ttft_ms"][p] for p in ("p50", "p99")},
                    "e2e_ms": {p: o["direct"]["e2e_ms"][p] for p in ("p50", "p99")},
                },
            )
    m = s["max_req_per_s"]
    c = s.get("one_core_req_per_s_from_cpu", {})
    trees = [n for n in c if n.startswith("kvroute@") and c[n]]
    for name in trees[1:]:
        s[f"{name}_over_{trees[0]}_cpu_per_request"] = round(c[trees[0]] / c[name], 2)
    for peer in ("litellm", "sglang-router"):
        if m.get("kvroute") and m.get(peer):
            s[f"kvroute_over_{peer}_max_req_per_s"] = round(m["kvroute"] / m[peer], 2)
        if c.get("kvroute") and c.get(peer):
            s[f"kvroute_over_{peer}_cpu_per_request"] = round(c["kvroute"] / c[peer], 2)
    return s


if __name__ == "__main__":
    main()
