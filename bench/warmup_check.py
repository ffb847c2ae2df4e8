"""``kvroute analyze --warmup 50%`` against kvcache-simulator's steady-state ceiling.

kvcache-simulator measures after a warm-up of half the requests by default (floor of
n · 0.5) with an unbounded cache as its ceiling; kvroute's ``--warmup 50%`` headline
should be the same number. The trace is the Mooncake-shaped generator of
``bench/simulate_bench.py`` (12,000 requests of ~30 blocks of 512 tokens; the real
Mooncake trace is not on this machine), written with a per-record ``block_size`` as
kvcache-simulator reads it. kvcache-simulator is not a dependency: pass the folder
holding its unpacked wheel (``pip download --no-deps kvcache-simulator``, then unzip).

    .venv/bin/python bench/warmup_check.py /tmp/peers [-n 12000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from kvroute.analyze.run import AnalyzeOptions, analyze_requests  # noqa: E402
from kvroute.analyze.warmup import Warmup  # noqa: E402
from kvroute.trace.records import BlockPrompt  # noqa: E402
from simulate_bench import hash_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("peers", type=Path)
    ap.add_argument("-n", type=int, default=12_000)
    args = ap.parse_args()
    sys.path.insert(0, str(args.peers))
    from kvcache_sim.plan import build_execution_plan  # type: ignore[import-not-found]
    from kvcache_sim.policies import simulate_ceiling  # type: ignore[import-not-found]
    from kvcache_sim.trace import parse_trace_lines  # type: ignore[import-not-found]

    reqs = hash_trace(args.n)
    lines = []
    for r in reqs:
        p = r.prompt
        assert isinstance(p, BlockPrompt)
        rec = {
            "input_length": p.num_tokens,
            "block_size": p.block_size_tokens,
            "hash_ids": p.block_hashes.tolist(),
        }
        lines.append(json.dumps(rec))
    trace = parse_trace_lines(lines)
    rows = []
    for share in (0.0, 0.5):
        t0 = time.perf_counter()
        res = analyze_requests(
            reqs,
            trace_path="mooncake-like",
            trace_format="mooncake",
            tokenizer_name=None,
            options=AnalyzeOptions(warmup=Warmup(share_requests=share) if share else None),
        )
        took = time.perf_counter() - t0
        peer = simulate_ceiling(build_execution_plan(trace, warmup_fraction=share)).hitRate
        rows.append(
            {
                "warmup": share,
                "kvroute_hit": res.overlap.hit_ratio,
                "kvroute_cold_hit": res.overlap.cold_hit_ratio,
                "kvcache_simulator_ceiling": peer,
                "diff_pp": 100 * (res.overlap.hit_ratio - peer),
                "kvroute_analyze_s": took,
            }
        )
        print(
            f"warm-up {share:.0%}: kvroute {res.overlap.hit_ratio:.4%}  "
            f"kvcache-simulator {peer:.4%}  ({took:.1f} s)"
        )
    out = Path(__file__).with_name("warmup_check_results.json")
    out.write_text(json.dumps({"num_requests": args.n, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
