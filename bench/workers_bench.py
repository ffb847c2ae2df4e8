"""`kvroute analyze --workers`: one tokenizer process vs a pool, side by side on this machine.

The default (no ``--workers``) is meant to be the fastest choice on the machine running
it (``trace/tokenize.py``: ``auto_pool_workers``, ``POOL_AFTER_REQUESTS``). This runs the
real CLI on a large text trace (``kvroute sample -n N``: chat sessions with tools, RAG,
code; every request is rendered with the chat template and tokenized) with ``--workers 1``,
``--workers 2``, ..., and the default, alternately, ``--repeats`` times, and reports the
median wall seconds (what the user waits; the pool's whole point is wall time), CPU
seconds of the process tree (user + system of the CLI and its pool workers) and the
largest resident set of one process of the tree, with the load average beside them.

    .venv/bin/python bench/workers_bench.py [-n 20000] [--repeats 3] [--old /work/main]

``--old`` adds the default of another tree (before this change the default was a pool
of one worker per core).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run(tree: Path, trace: Path, workers: int | None, out: Path) -> tuple[float, float, float]:
    """Wall s, CPU s (the process and its pool) and peak RSS in MiB (largest single
    process of the tree) of one analyze, as GNU time reports them."""
    exe = tree / ".venv" / "bin" / "kvroute"
    cmd = [str(exe), "analyze", str(trace), "--no-breakers", "-q", "--json", str(out)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    report = out.with_suffix(".time")
    timed = ["/usr/bin/time", "-o", str(report), "-f", "%e %U %S %M", *cmd]
    subprocess.run(timed, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, user, system, rss_kib = report.read_text().split()[-4:]
    return float(wall), float(user) + float(system), float(rss_kib) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="1,2", help="explicit --workers values to time")
    ap.add_argument("--old", type=Path, help="another tree whose default to time too")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "workers_results.json")
    args = ap.parse_args()
    kvroute = ROOT / ".venv" / "bin" / "kvroute"
    cases: list[tuple[str, Path, int | None]] = [
        (f"--workers {w}", ROOT, int(w)) for w in args.workers.split(",")
    ]
    cases.append(("default", ROOT, None))
    if args.old is not None:
        cases.append(("old default", args.old.resolve(), None))
    results: dict[str, Any] = {"cores": os.cpu_count(), "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "sample.jsonl"
        subprocess.run([str(kvroute), "sample", str(trace), "-n", str(args.n)], check=True)
        results["trace"] = {"requests": args.n, "bytes": trace.stat().st_size}
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _ in cases}
        outs: dict[str, Path] = {}
        for _ in range(args.repeats):
            for name, tree, workers in cases:
                outs[name] = Path(tmp) / f"{name.replace(' ', '_')}.json"
                runs[name].append(run(tree, trace, workers, outs[name]))
        same = len({json.loads(p.read_text())["overlap"]["hit_ratio"] for p in outs.values()}) == 1
    rows = {}
    for name, values in runs.items():
        rows[name] = {
            "wall_s": statistics.median(v[0] for v in values),
            "cpu_s": statistics.median(v[1] for v in values),
            "peak_rss_mib": statistics.median(v[2] for v in values),
            "runs": values,
        }
        print(
            f"{name:>14}: {rows[name]['wall_s']:.1f} s wall, {rows[name]['cpu_s']:.1f} CPU s, "
            f"peak {rows[name]['peak_rss_mib']:.0f} MiB"
        )
    results.update(rows=rows, same_results=same, load_average_after=os.getloadavg())
    print(f"same results: {same}; load average {results['load_average_after']}")
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
