"""`kvroute bench`'s own client overhead, one tree against another, in one run.

Run:  .venv/bin/python bench/bench_client_ab.py --old /path/to/old/tree [--rounds 6]

One stub upstream (``bench/bench_client.py --serve``: 8 content chunks 2 ms apart per
request) serves both trees. Each round runs, for each tree in turn (the order alternates
round by round, so the machine's drift hits both alike), in a fresh process importing
that tree's ``src/`` and its own ``bench/bench_client.py``: the closed loop (32 users,
3,000 requests; client CPU per request and requests/s) and the open loop (200
requests/s for 5 s; dispatch delay and TTFT percentiles). Prints each run, then the
medians and new/old ratios; writes them to ``bench/bench_client_ab_results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "bench_client_ab_results.json"

_ONE_RUN = """
import json, sys
sys.path.insert(0, {bench!r})
import bench_client as b
closed = b._closed_kvroute({url!r}, 3000, 32)
opened = b._open_loop({url!r}, 200.0, 5.0, 1)
print(json.dumps({{"closed": closed, "open": opened}}))
"""

FIGURES = {
    "cpu_us_per_req": ("closed", "cpu_us_per_req"),
    "req_per_s": ("closed", "req_per_s"),
    "dispatch_p50_ms": ("open", "dispatch_p50_ms"),
    "dispatch_p99_ms": ("open", "dispatch_p99_ms"),
    "ttft_p50_ms": ("open", "ttft_p50_ms"),
    "ttft_p99_ms": ("open", "ttft_p99_ms"),
}


def _run(tree: Path, url: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    code = _ONE_RUN.format(bench=str(tree / "bench"), url=url)
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["load_average_1m"] = os.getloadavg()[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True, help="the tree to compare against")
    ap.add_argument("--new", type=Path, default=ROOT)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    from kvroute.engines.local import free_port

    port = free_port()
    stub = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "bench_client.py"), "--serve", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    try:
        assert stub.stdout is not None and stub.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}"
        for r in range(args.rounds):
            for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
                one = _run(args.old if name == "old" else args.new, url)
                runs[name].append(one)
                print(r, name, {k: one[s][f] for k, (s, f) in FIGURES.items()}, flush=True)
    finally:
        stub.terminate()
        stub.wait(10)
    medians = {
        key: {name: statistics.median(run[s][f] for run in runs[name]) for name in ("old", "new")}
        for key, (s, f) in FIGURES.items()
    }
    for key, m in medians.items():
        print(f"{key}: old {m['old']:.3f}  new {m['new']:.3f}  new/old {m['new'] / m['old']:.3f}")
    OUT.write_text(json.dumps({"medians": medians, "runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
