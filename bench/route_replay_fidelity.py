"""How close ``bench/route_replay.py``'s service model is to the real runs.

Replays seed 0 (the schedules the real benchmark ran) through each front and prints it
next to the figures of ``gateway_cache_routing_issue7.json`` (4 llama-server replicas,
2 slots each, on the shared 2-core machine): hit, TTFT p50 and p99, run time. The last
line is the RMS of log(replay / real) over the times. The real runs vary by ~30 %
between repeats (load from other work), so read orderings, not digits.

Run: ``.venv/bin/python bench/route_replay_fidelity.py`` (model flags as route_replay's,
e.g. ``--cores 2 --attn-tokens 0 --decode-ms 40`` for the model before the fit).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_cache_routing import make_requests
from route_replay import parser, replay

FRONTS = {"sglr-ca": "sglr", "kvroute-ca": "ca"}


def main() -> None:
    args = parser().parse_args()
    runs = json.loads((Path(__file__).parent / "gateway_cache_routing_issue7.json").read_text())
    cache: dict[tuple[str, str], dict[str, Any]] = {}
    errors: list[float] = []
    print(
        f"{'workload':<14} {'front':<5} {'hit % real / replay':>20} {'p50 s':>13} {'p99 s':>13} {'run s':>13}"
    )
    for run in runs["runs"]:
        workload, front = run["workload"], FRONTS[run["front"]]
        if (workload, front) not in cache:
            requests = make_requests(workload, args.num_requests, args.max_tokens, 0)
            cache[workload, front] = replay(front, requests, args)
        sim = cache[workload, front]
        real = (run["ttft_p50_ms"] / 1000, run["ttft_p99_ms"] / 1000, run["wall_s"])
        ours = (sim["ttft_p50_s"], sim["ttft_p99_s"], sim["makespan_s"])
        errors += [math.log(o / r) for o, r in zip(ours, real, strict=True)]
        cells = " ".join(f"{r:>6.1f} /{o:>6.1f}" for r, o in zip(real, ours, strict=True))
        print(
            f"{workload:<14} {front:<5} {run['engine_hit_pct']:>10.1f} /{sim['hit_pct']:>8.1f} {cells}"
        )
    rms = math.sqrt(statistics.fmean(e * e for e in errors))
    print(f"RMS log(replay / real) over TTFT p50, p99 and run time: {rms:.3f}")


if __name__ == "__main__":
    main()
