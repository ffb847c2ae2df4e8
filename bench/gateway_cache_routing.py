"""Cache-aware routing on real replicas (llama-server or SGLang): kvroute vs round robin vs sglang-router.

Four ``llama-server`` replicas (SmolLM2-135M GGUF, ``--parallel 2``, 4096 tokens per
slot, ``--cache-ram 0`` so a slot is the only cache, ``cache_prompt`` on: the server's
default) are started once. Then, for each workload (``agent``, ``multiturn`` from
``kvroute bench``, one pre-generated schedule each, ``max_tokens`` cut to a few tokens
with ``ignore_eos``; ``multiturn-own`` gives each session its own system prompt,
``multiturn-long`` runs 8 turns a session instead of 4) and each front in turn:

- ``kvroute-rr``: ``kvroute serve``, policy ``round_robin``;
- ``kvroute-ca``: ``kvroute serve``, policy ``cache_aware`` (its defaults; each backend's
  cache view ``slots: 2, capacity_tokens: 8192``);
- ``sglr-ca``: sglang-router 0.3.2 ``--policy cache_aware`` with its defaults
  (``--cache-threshold 0.3``, ``--balance-abs-threshold 64``,
  ``--balance-rel-threshold 1.5``, ``--eviction-interval-secs 60``,
  ``--max-tree-size 2^26``)

every replica's slots are erased (cold start), the front is started fresh, the same
closed-loop schedule runs through it (``kvroute bench``'s runner: streaming, TTFT
per request), and the front is stopped. Measured per run, from the replicas' own
``/metrics`` deltas (front-agnostic):

- engine-reported cache hit = Σ ``prompt_tokens_cached`` ÷ Σ prompt tokens, over replicas;
- per replica: requests (``tokens_predicted`` delta ÷ ``max_tokens``: every request
  generates exactly ``max_tokens`` with ``ignore_eos``) and prompt tokens; load
  imbalance = max ÷ mean of each;
- TTFT p50 / p99 at the client.

sglang-router is installed into a throwaway venv (never the project's)::

    python3 -m venv /tmp/kvroute-bench/sglr-venv
    /tmp/kvroute-bench/sglr-venv/bin/pip install sglang-router

Run: ``nice .venv/bin/python bench/gateway_cache_routing.py`` (about an hour and a half on
2 shared cores). Writes ``bench/gateway_cache_routing_results.json`` and prints a table.

``--engine sglang`` puts the fronts in front of real SGLang-CPU servers instead
(``kvroute engines up --engine sglang``: SGLang's own scheduler and radix cache,
plain-torch layers), the pairing sglang-router is built for. Defaults then: 2 replicas,
each ``--max-running-requests 4``, a pool of ``--sglang-pool-tokens`` (8,192), page
size 1, LRU; kvroute's view of each is SGLang's radix model with those settings
(``cache: {capacity_tokens}``) on the served model's own tokenizer. Per replica the
engine-reported hit is ``sglang:cached_tokens_total`` ÷ ``sglang:prompt_tokens_total``
and the request count ``sglang:num_requests_total`` (deltas); the cache is emptied with
``POST /flush_cache`` before each front. SGLang-CPU prefills at tens to hundreds of
tokens a second here, so keep runs small, e.g. one workload per call::

    nice .venv/bin/python bench/gateway_cache_routing.py --engine sglang \
        --workloads agent --num-requests 24 --concurrency 4 --max-tokens 4 \
        --out bench/gateway_cache_routing_sglang_agent.json
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from kvroute.bench.results.metrics import ttft_s
from kvroute.bench.results.record import Outcome
from kvroute.bench.run_options import BenchEndpoint, RunOptions
from kvroute.bench.runner import run_bench, workload_info
from kvroute.bench.schedule import ClosedLoop
from kvroute.bench.scrape import CacheMode
from kvroute.bench.workloads.base import BenchRequest
from kvroute.bench.workloads.export import analyze_workload
from kvroute.bench.workloads.registry import generate
from kvroute.engines.http import counter_value, get_metrics
from kvroute.engines.launch import DEFAULT_MODEL_NAME, LaunchOptions
from kvroute.engines.llamacpp import LlamaCppAdapter, cache_counters_from_metrics
from kvroute.engines.local import LocalEngines, free_port
from kvroute.engines.paths import default_model_path
from kvroute.engines.process import Lifetime
from kvroute.engines.sglang import SglangAdapter
from kvroute.engines.sglang import cache_counters_from_metrics as sglang_cache_counters
from kvroute.engines.state import EngineRecord, StateDir
from kvroute.engines.vllm_paths import vllm_model_dir
from kvroute.trace.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parent.parent
KVROUTE = ROOT / ".venv" / "bin" / "kvroute"
SGLR_PY = Path("/tmp/kvroute-bench/sglr-venv/bin/python")
HOST = "127.0.0.1"
TOKENS_PREDICTED = "llamacpp:tokens_predicted_total"
SGLANG_REQUESTS = "sglang:num_requests_total"
ENGINES = ("llamacpp", "sglang")
FRONTS = ("kvroute-rr", "kvroute-ca", "sglr-ca")
# Enough sessions that 4 replicas x 2 slots thrash under a careless router. Each entry:
# the kvroute bench workload and its parameters. "multiturn-own" is multiturn with a
# system prompt per session (no prefix shared across sessions).
_MULTITURN = {
    "concurrent_sessions": "8",
    "turns": "4",
    "system_tokens": "128",
    "user_tokens": "32",
    "answer_tokens": "64",
    "think_s": "0.1",
}
WORKLOADS: dict[str, tuple[str, dict[str, str]]] = {
    "multiturn": ("multiturn", _MULTITURN),
    "multiturn-own": ("multiturn", _MULTITURN | {"shared_system": "false"}),
    # Sessions twice as long: where "hit >= 2x round robin" is within reach at all. On
    # the 4-turn schedules round robin's hit is more than half the ideal, since every
    # replica soon holds the shared system prompt (bench/RESULTS.md).
    "multiturn-long": ("multiturn", _MULTITURN | {"turns": "8"}),
    "agent": (
        "agent",
        {
            "concurrent_agents": "4",
            "steps": "4",
            "num_tools": "3",
            "tool_depth": "1",
            "system_tokens": "128",
            "tool_result_tokens": "48",
            "think_s": "0.05",
        },
    ),
}


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaReading:
    prompt_tokens: int
    cached_tokens: int
    finished: int
    """llama-server: generated tokens (its /metrics counts no requests); SGLang: requests."""


async def read_replicas(records: Sequence[EngineRecord]) -> list[ReplicaReading]:
    async with httpx.AsyncClient() as client:
        out = []
        for rec in records:
            metrics = await get_metrics(client, rec.base_url)
            if rec.engine == "sglang":
                counters = sglang_cache_counters(metrics)
                finished = counter_value(metrics, SGLANG_REQUESTS) or 0
            else:
                counters = cache_counters_from_metrics(metrics)
                finished = counter_value(metrics, TOKENS_PREDICTED) or 0
            # SGLang serves its prompt/cached counters only after its first request
            out.append(
                ReplicaReading(counters.prompt_tokens or 0, counters.cached_tokens or 0, finished)
            )
        return out


async def erase_replicas(records: Sequence[EngineRecord]) -> None:
    async with httpx.AsyncClient() as client:
        for rec in records:
            if rec.engine == "sglang":
                await SglangAdapter(rec.base_url, client=client).reset_cache()
            else:
                await LlamaCppAdapter(rec.base_url, client=client).reset_cache()


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"front exited with {proc.returncode} before serving {url}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready within {timeout_s} s")


def kvroute_config(records: Sequence[EngineRecord], policy: str, args: argparse.Namespace) -> str:
    if args.engine == "sglang":
        cache = f"{{capacity_tokens: {args.sglang_pool_tokens}}}"
        tokenizer = vllm_model_dir()  # the HF directory SGLang serves
    else:
        cache = f"{{slots: {args.slots}, capacity_tokens: {args.slots * 4096}, cache_ram_mib: 0}}"
        tokenizer = default_model_path()
    backends = "".join(
        f"  - {{name: r{i}, url: '{r.base_url}', engine: {args.engine}, cache: {cache}}}\n"
        for i, r in enumerate(records)
    )
    return (
        f"tokenizer: '{tokenizer}'\n"
        f"backends:\n{backends}"
        f"routes: [{{name: r, pool: default, policy: {policy}}}]\n"
    )


def quiet_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env |= {"HF_HUB_OFFLINE": "1", "NO_PROXY": "*", "no_proxy": "*", "RUST_LOG": "warn"}
    return env


def start_front(
    front: str, records: Sequence[EngineRecord], tmp: Path, args: argparse.Namespace
) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    log = open(tmp / f"{front}.log", "ab")  # noqa: SIM115 - lives as long as the front
    if front.startswith("kvroute"):
        policy = "round_robin" if front.endswith("rr") else "cache_aware"
        config = tmp / f"{front}.yaml"
        config.write_text(kvroute_config(records, policy, args))
        argv = [str(KVROUTE), "serve", "--config", str(config), "--port", str(port)]
        argv += ["--no-access-log", "-q"]
        env = dict(os.environ)
    else:
        if not SGLR_PY.exists():
            raise RuntimeError(f"{SGLR_PY} missing (install: see this script's docstring)")
        argv = [str(SGLR_PY), "-m", "sglang_router.launch_router", "--worker-urls"]
        argv += [r.base_url for r in records]
        argv += ["--policy", "cache_aware", "--host", HOST, "--port", str(port)]
        argv += ["--log-level", "warn", "--prometheus-host", HOST]
        argv += ["--prometheus-port", str(free_port()), "--worker-startup-timeout-secs", "60"]
        env = quiet_env()
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
    url = f"http://{HOST}:{port}"
    try:
        wait_http(f"{url}/v1/models", proc)
    except BaseException:
        stop(proc)
        raise
    return url, proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def make_requests(label: str, num: int, max_tokens: int, seed: int) -> list[BenchRequest]:
    name, params = WORKLOADS[label]
    requests = generate(name, num, load_tokenizer(), seed=seed, params=params)
    return [dataclasses.replace(r, max_tokens=max_tokens) for r in requests]


def ideal_hit_pct(requests: Sequence[BenchRequest]) -> float:
    """The workload's prefix overlap (``kvroute analyze``): the hit of one unbounded cache."""
    tok = load_tokenizer()
    return percent(analyze_workload(requests, tok).overlap.hit_ratio)


def percent(x: float) -> float:
    return round(100.0 * x, 1)


def run_front(
    front: str,
    workload: str,
    requests: list[BenchRequest],
    records: Sequence[EngineRecord],
    args: argparse.Namespace,
    tmp: Path,
) -> dict[str, Any]:
    asyncio.run(erase_replicas(records))
    url, proc = start_front(front, records, tmp, args)
    try:
        before = asyncio.run(read_replicas(records))
        name, params = WORKLOADS[workload]
        info = workload_info(name, params, args.seed, "smollm2", requests)
        options = RunOptions(
            loads=(ClosedLoop(args.concurrency),),
            cache=CacheMode.WARM,  # erased above; the front must not reset anything
            ignore_eos=True,
            seed=args.seed,
            timeout_s=120.0,
            max_duration_s=900.0,
        )
        t0 = time.perf_counter()
        result = run_bench(
            requests, info, [BenchEndpoint(front, url, None, DEFAULT_MODEL_NAME)], options
        )
        wall_s = time.perf_counter() - t0
        after = asyncio.run(read_replicas(records))
        predicted = predicted_cached_tokens(url) if front.startswith("kvroute") else None
        front_cpu_s = group_cpu_s(proc.pid)
    finally:
        stop(proc)
    recs = result.runs[0].requests
    ttfts = sorted(t for r in recs if (t := ttft_s(r)) is not None)
    prompt = [a.prompt_tokens - b.prompt_tokens for a, b in zip(after, before, strict=True)]
    cached = [a.cached_tokens - b.cached_tokens for a, b in zip(after, before, strict=True)]
    per_request = 1 if args.engine == "sglang" else args.max_tokens
    reqs = [(a.finished - b.finished) / per_request for a, b in zip(after, before, strict=True)]
    resp_prompt = sum(r.prompt_tokens or 0 for r in recs)
    resp_cached = sum(r.cached_tokens or 0 for r in recs)
    return {
        "front": front,
        "workload": workload,
        "num_ok": sum(r.outcome is Outcome.OK for r in recs),
        "num_errors": sum(r.outcome is Outcome.ERROR for r in recs),
        "wall_s": round(wall_s, 1),
        "front_cpu_s": round(front_cpu_s, 1),
        "engine_hit_pct": percent(sum(cached) / max(sum(prompt), 1)),
        "predicted_hit_pct": percent(predicted / max(sum(prompt), 1))
        if predicted is not None
        else None,
        "response_hit_pct": percent(resp_cached / resp_prompt) if resp_prompt else None,
        "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1) if ttfts else None,
        "ttft_p99_ms": round(1000 * quantile(ttfts, 0.99), 1) if ttfts else None,
        "requests_per_replica": [round(x, 1) for x in reqs],
        "prompt_tokens_per_replica": prompt,
        "cached_tokens_per_replica": cached,
        "max_over_mean_requests": round(max(reqs) / statistics.fmean(reqs), 3),
        "max_over_mean_prompt_tokens": round(max(prompt) / statistics.fmean(prompt), 3),
    }


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the processes of group ``pgid`` (the
    front and anything it started): what it took from the replicas on shared cores."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid:  # fields after "(comm)": state ppid pgrp ...
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def predicted_cached_tokens(url: str) -> int:
    """Σ over backends of the gateway's ``kvroute:cache_predicted_tokens_total``: what
    its cache views predicted for the requests the engines reported on."""
    text = httpx.get(f"{url}/metrics", timeout=10.0).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("kvroute:cache_predicted_tokens_total")
    )


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation, numpy's default."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def start_replicas(state: Path, args: argparse.Namespace) -> list[EngineRecord]:
    if args.engine == "sglang":
        options = LaunchOptions(
            parallel=args.slots,
            ctx_tokens=4096,
            threads=args.threads,
            sglang_max_total_tokens=args.sglang_pool_tokens,
        )
    else:
        options = LaunchOptions(parallel=args.slots, ctx_tokens=4096, threads=args.threads)

    async def up() -> list[EngineRecord]:
        async with httpx.AsyncClient() as client:
            return await LocalEngines(StateDir(state), client=client).up(
                args.engine,
                replicas=args.replicas,
                options=options,
                lifetime=Lifetime.TIED_TO_PARENT,
            )

    return asyncio.run(up())


def stop_replicas(state: Path) -> None:
    async def down() -> None:
        async with httpx.AsyncClient() as client:
            await LocalEngines(StateDir(state), client=client).down()

    asyncio.run(down())


def table(rows: Sequence[dict[str, Any]], say: Callable[[str], None]) -> None:
    say(
        f"{'workload':<10} {'front':<11} {'hit %':>6} {'pred %':>6} {'ttft p50':>9} {'ttft p99':>9} "
        f"{'req max/mean':>12} {'tok max/mean':>12}  requests per replica"
    )
    for r in rows:
        say(
            f"{r['workload']:<10} {r['front']:<11} {r['engine_hit_pct']:>6} "
            f"{r.get('predicted_hit_pct') or '-':>6} "
            f"{r['ttft_p50_ms']:>7}ms {r['ttft_p99_ms']:>7}ms "
            f"{r['max_over_mean_requests']:>12} {r['max_over_mean_prompt_tokens']:>12}  "
            f"{r['requests_per_replica']}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=ENGINES, default="llamacpp", help="the replicas' engine")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--fronts", default=",".join(FRONTS))
    ap.add_argument("--num-requests", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=8, help="closed-loop users")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--replicas", type=int, help="default: 4 llama-servers, 2 SGLang servers")
    ap.add_argument(
        "--slots", type=int, help="llama-server slots (default 2) / SGLang running requests (4)"
    )
    ap.add_argument(
        "--sglang-pool-tokens", type=int, default=8192, help="SGLang --max-total-tokens"
    )
    ap.add_argument("--threads", type=int, default=1, help="llama-server threads per replica")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "gateway_cache_routing_results.json"
    )
    args = ap.parse_args()
    sglang = args.engine == "sglang"
    args.replicas = args.replicas or (2 if sglang else 4)
    args.slots = args.slots or (4 if sglang else 2)
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kvroute-cr-") as tmp_name:
        tmp = Path(tmp_name)
        records = start_replicas(tmp / "state", args)
        try:
            for workload in args.workloads.split(","):
                requests = make_requests(workload, args.num_requests, args.max_tokens, args.seed)
                ideal = ideal_hit_pct(requests)
                for front in args.fronts.split(","):
                    row = run_front(front, workload, requests, records, args, tmp)
                    row["ideal_hit_pct"] = ideal
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    rows.append(row)
        finally:
            stop_replicas(tmp / "state")
    table(rows, print)
    result = {
        "setup": {
            "engine": args.engine,
            "replicas": args.replicas,
            "slots_per_replica": args.slots,
            "ctx_tokens_per_slot": 4096,
            "sglang_pool_tokens": args.sglang_pool_tokens if sglang else None,
            "threads_per_replica": args.threads,
            "num_requests": args.num_requests,
            "closed_loop_users": args.concurrency,
            "max_tokens": args.max_tokens,
            "seed": args.seed,
            "workloads": {k: {"workload": n, "params": p} for k, (n, p) in WORKLOADS.items()},
            "sglang_router": "0.3.2 --policy cache_aware, defaults: cache_threshold 0.3, "
            "balance_abs_threshold 64, balance_rel_threshold 1.5",
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "runs": rows,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
