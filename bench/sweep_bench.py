"""Capacity sweeps of `kvroute simulate`: three engines x four capacities, old tree vs new.

Target (issue 24): the Mooncake 12k-request trace, three engines x four capacities, in
at most 5 s on this machine. The real trace is not here; ``bench/mooncake_shape.py``
writes a stand-in of the same shape (12,031 requests, 512-token blocks, one system
prompt shared by most requests, multi-turn conversations minutes apart).

Each configuration runs the real CLI of both trees alternately, ``--repeats`` times, and
reports the median CPU seconds of the child process (user + system; the machine is
shared, wall time mostly measures the neighbours) and wall seconds, the ratio, and
whether both trees gave the same numbers (every engine's figures at the pool and every
sweep point; they must be equal, not close).

    .venv/bin/python bench/sweep_bench.py [--old /work/main] [--repeats 3]

``--old`` is a checkout with its own ``.venv``, or a ``git archive REV src`` unpacked
with ``src/kvroute/*/_native`` built for it and ``.venv`` linked to another checkout's
venv (each tree runs with its own ``src`` first on ``PYTHONPATH``).

Configurations:
- ``tokens``: ``--capacity-tokens 4Mi --sweep-sizes 2Mi,4Mi,8Mi,16Mi`` (no KV bytes per
  token: llama.cpp's host prompt cache is limited to n_ctx tokens, the case that made
  its model ~28x the others);
- ``preset``: the default pool (llama-3.1-8b on one H100) and the same sweep.
Both with ``--no-ideal`` (the sweep alone; the ideal is `kvroute analyze`'s pass).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from mooncake_shape import generate, summary, write  # noqa: E402

SWEEP = "2Mi,4Mi,8Mi,16Mi"
CONFIGS: dict[str, list[str]] = {
    "tokens": ["--capacity-tokens", "4Mi", "--sweep-sizes", SWEEP],
    "preset": ["--sweep-sizes", SWEEP],
}


def run_cli(tree: Path, trace: Path, args: list[str], out: Path) -> tuple[float, float]:
    """CPU and wall seconds of one `kvroute simulate` in ``tree``."""
    exe = tree / ".venv" / "bin" / "kvroute"
    cmd = [str(exe), "simulate", str(trace), "--no-ideal", "--json", str(out), *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(tree)
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def _env(tree: Path) -> dict[str, str]:
    """Each tree runs its own sources, first on the path: an old tree may be a bare
    ``git archive`` of ``src`` next to a ``.venv`` link to another checkout's venv."""
    return {**os.environ, "PYTHONPATH": str(tree / "src")}


def figures(path: Path) -> dict[str, Any]:
    """What must be equal between the trees: per engine at the pool, and the curves."""
    data = json.loads(path.read_text())
    engines = {
        e["engine"]: [
            e["capacity_tokens"],
            e["cached_tokens"],
            e["num_admitted"],
            e["evicted_tokens"],
            e["num_evictions"],
            e["peak_pinned_tokens"],
            e["counters"],
        ]
        for e in data["engines"]
    }
    curves = {
        c["engine"]: [c["capacity_tokens"], c["hit_ratio"], c["evicted_tokens"], c["num_rejected"]]
        for c in data["sweep"]
    }
    return {"engines": engines, "sweep": curves}


def native_status(tree: Path) -> str:
    code = (  # trees from before kvroute._accel had kvroute.cache.native
        "try:\n from kvroute import _accel; print(_accel.enable()['cache'])\n"
        "except ImportError:\n from kvroute.cache import native; print(native.status())"
    )
    exe = tree / ".venv" / "bin" / "python"
    res = subprocess.run(
        [str(exe), "-c", code], capture_output=True, text=True, check=False, env=_env(tree)
    )
    return res.stdout.strip() or res.stderr.strip()[-200:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, default=Path("/work/main"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=sorted(CONFIGS))
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "sweep_results.json")
    args = ap.parse_args()
    trees = {"old": args.old.resolve(), "new": ROOT}
    results: dict[str, Any] = {
        "load_average_before": os.getloadavg(),
        "builds": {k: native_status(t) for k, t in trees.items()},
    }
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "mooncake-shaped.jsonl"
        records = generate()
        write(trace, records)
        results["trace"] = summary(records)
        for name, extra in CONFIGS.items():
            if args.only and name != args.only:
                continue
            times: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
            outs = {k: Path(tmp) / f"{name}-{k}.json" for k in trees}
            for _ in range(args.repeats):
                for key, tree in trees.items():
                    times[key].append(run_cli(tree, trace, extra, outs[key]))
            same = figures(outs["old"]) == figures(outs["new"])
            row = {
                "args": extra,
                **{
                    f"{k}_{what}_s": statistics.median(t[i] for t in v)
                    for k, v in times.items()
                    for i, what in ((0, "cpu"), (1, "wall"))
                },
                "runs": times,
                "same_results": same,
            }
            row["cpu_ratio_old_over_new"] = row["old_cpu_s"] / row["new_cpu_s"]
            results[name] = row
            print(
                f"{name}: old {row['old_cpu_s']:.2f} CPU s ({row['old_wall_s']:.1f} s wall), "
                f"new {row['new_cpu_s']:.2f} CPU s ({row['new_wall_s']:.1f} s wall), "
                f"{row['cpu_ratio_old_over_new']:.1f}x; same results: {same}"
            )
    results["load_average_after"] = os.getloadavg()
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
