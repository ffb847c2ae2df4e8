"""Cost of the live traffic window on the gateway's event loop, and of prompt-drift
detection in ``kvroute analyze``, each measured side by side with the path without it.

    .venv/bin/python bench/traffic_shape_cost.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.gateway.ops.metrics import GatewayMetrics
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.gateway.types import RequestContext, WorkloadClass
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.records import Request, TokenPrompt


def gateway_observe(num_requests: int = 20_000) -> None:
    """µs per observed request: a 4k-token prompt (256 blocks; a shared 3k-token
    system prompt) vs an untokenized request (class and usage only)."""
    rng = np.random.default_rng(0)
    system = rng.integers(0, 50_000, size=3072, dtype=np.uint32)
    keys = [
        chain_hashes(
            np.concatenate([system, rng.integers(0, 50_000, size=1024, dtype=np.uint32)]), 16
        )
        for _ in range(200)
    ]
    traffic = TrafficShape(TrafficConfig())
    times: dict[str, list[float]] = {"tokenized": [], "untokenized": []}
    for _ in range(5):
        start = time.perf_counter()
        for i in range(num_requests // 5):
            k = keys[i % 200]
            traffic.observe(
                float(i),
                workload="agent",
                backend="b1",
                block_hashes=k,  # the cache view's array, as observe_outcome passes it
                num_tokens=4096,
                usage_prompt_tokens=4096,
                reported_cached_tokens=3072,
                predicted_cached_tokens=3072,
            )
        times["tokenized"].append((time.perf_counter() - start) / (num_requests // 5) * 1e6)
        start = time.perf_counter()
        for i in range(num_requests // 5):
            traffic.observe(float(i), workload="chat", backend="b1", usage_prompt_tokens=100)
        times["untokenized"].append((time.perf_counter() - start) / (num_requests // 5) * 1e6)
    # Baselines on the same machine, same run: what the gateway already does per request.
    metrics = GatewayMetrics()
    ctx = RequestContext(workload=WorkloadClass.AGENT, backend="b1", pool="p", policy="x")
    ctx.e2e_s, ctx.ttft_s, ctx.prompt_tokens, ctx.completion_tokens = 0.5, 0.1, 4096, 20
    tokens = np.concatenate([system, rng.integers(0, 50_000, size=1024, dtype=np.uint32)])
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(num_requests // 5):
            metrics.observe(ctx, 200)
        times.setdefault("baseline GatewayMetrics.observe", []).append(
            (time.perf_counter() - start) / (num_requests // 5) * 1e6
        )
        start = time.perf_counter()
        for _ in range(num_requests // 50):
            chain_hashes(tokens, 16)
        times.setdefault("baseline chain_hashes of the 4k prompt", []).append(
            (time.perf_counter() - start) / (num_requests // 50) * 1e6
        )
    for name, values in times.items():
        print(f"gateway {name}: median {statistics.median(values):.1f} µs per request")


def analyze_drift(num_requests: int = 20_000) -> None:
    rng = np.random.default_rng(0)
    systems = [
        rng.integers(1000, 30000, size=int(rng.integers(200, 2000)), dtype=np.uint32)
        for _ in range(8)
    ]
    reqs = []
    for i in range(num_requests):
        s = systems[int(rng.integers(0, 8))]
        q = rng.integers(30000, 60000, size=int(rng.integers(50, 600)), dtype=np.uint32)
        reqs.append(
            Request(
                prompt=TokenPrompt(np.concatenate([s, q])),
                arrival_s=float(i),
                session_id=f"u{i % 300}",
            )
        )
    runs: dict[str, list[float]] = {"with drift windows": [], "without": []}
    for _ in range(3):
        for name, window in (("with drift windows", 200), ("without", 10**9)):
            start = time.perf_counter()
            analyze_requests(
                reqs,
                trace_path="bench",
                trace_format="synthetic",
                tokenizer_name=None,
                options=AnalyzeOptions(drift_window_requests=window),
            )
            runs[name].append(time.perf_counter() - start)
    on, off = (statistics.median(v) for v in runs.values())
    print(
        f"analyze {num_requests} requests: median {off:.2f} s without drift windows, "
        f"{on:.2f} s with (x{on / off:.3f})"
    )


if __name__ == "__main__":
    gateway_observe()
    import sys

    if "--gateway-only" not in sys.argv:
        analyze_drift()
