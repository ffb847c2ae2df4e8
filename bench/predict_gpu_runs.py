"""Fit the step-time model on the public H100/H200 runs and report its errors per group.

Reads ``../shared/gpu-runs/calib.csv`` (see its README: closed loops at fixed
concurrency, fixed input/output lengths, no prefix reuse), builds one closed-loop replay
per run, and fits one coefficient vector per engine and GPU (all models, precisions and
tensor-parallel sizes of that pair together). Reported per group (engine, GPU, model,
precision): median |error| of TTFT and TPOT, in-sample and two-fold cross-validated
(folds by a hash of the run id, so no run is predicted by a fit that saw it).
``--write-priors`` saves the full fits, with bootstrap draws, as the shipped priors.

    .venv/bin/python bench/predict_gpu_runs.py [--csv PATH] [--write-priors] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from kvroute.cache.capacity import capacity_from_hardware, load_presets
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings
from kvroute.predict.calibration import Calibration
from kvroute.predict.engine import EngineFlags
from kvroute.predict.fit import GPU_UPPER, RunPoint, bootstrap, fit, predict_points, relative_errors
from kvroute.predict.hardware import hardware_for, model_cost

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = Path("/work/shared/gpu-runs/calib.csv")
MODELS = {
    "Qwen/Qwen3-32B": "qwen3-32b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
}
GPUS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200"}
PROMPTS_PER_CLIENT = 5
"""How these runs were measured, as the usual serving benchmarks do it (``num_prompts =
5 x concurrency``, all clients starting at once, the mean reported): the replay serves
``5 C`` requests and the fit matches their mean, the first wave included. One protocol
for the whole collection, not a per-row knob."""
# vLLM on a >= 70 GiB GPU (not A100) defaults to 1024 running sequences.
FLAGS = EngineFlags(cache=EngineSettings(vllm=VllmConfig(max_num_seqs=1024)))


def load_points(path: Path) -> list[tuple[str, RunPoint]]:
    presets = load_presets()
    out = []
    with path.open() as f:
        for row in csv.DictReader(f):
            shape = presets.models[MODELS[row["model_path"]]]
            gpu = presets.gpus[GPUS[row["system"]]]
            dtype = "fp8" if row["precision"] == "fp8" or "FP8" in row["model_path"] else "bf16"
            tp = int(row["tp_size"])
            cost = model_cost(shape, dtype=dtype)
            cap = capacity_from_hardware(
                shape, gpu, num_gpus=tp, weight_bytes=int(cost.weight_bytes)
            ).tokens
            label = f"{row['backend']} {GPUS[row['system']]} {MODELS[row['model_path']]} {dtype}"
            point = RunPoint(
                label=label,
                engine=row["backend"],
                hardware=hardware_for(gpu, num_gpus=tp, dtype=dtype),
                cost=cost,
                capacity_tokens=cap,
                isl=int(row["isl"]),
                osl=int(row["osl"]),
                concurrency=int(row["concurrency"]),
                ttft_s=float(row["ttft_ms"]) / 1e3,
                tpot_s=float(row["tpot_ms"]) / 1e3,
                num_requests=PROMPTS_PER_CLIENT * int(row["concurrency"]),
                statistic="mean",
            )
            out.append((row["id"], point))
    return out


def _fold(run_id: str) -> int:
    return hashlib.sha256(run_id.encode()).digest()[0] & 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--write-priors", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = load_points(args.csv)
    by_fit: dict[tuple[str, str], list[tuple[str, RunPoint]]] = defaultdict(list)
    for rid, p in rows:
        by_fit[(p.engine, p.hardware.key)].append((rid, p))
    report: dict[str, dict[str, float | int]] = {}
    priors = []
    rng = np.random.default_rng(0)
    for (engine, gpu), items in sorted(by_fit.items()):
        points = [p for _, p in items]
        full = fit(points, FLAGS, upper=GPU_UPPER)
        err_in = relative_errors(points, full.predictions)
        cv = np.zeros_like(err_in)
        for k in (0, 1):
            train = [p for rid, p in items if _fold(rid) != k]
            test_idx = [i for i, (rid, _) in enumerate(items) if _fold(rid) == k]
            if not train or not test_idx:
                continue
            sub = fit(train, FLAGS, upper=GPU_UPPER)
            test = [points[i] for i in test_idx]
            cv[test_idx] = relative_errors(test, predict_points(test, sub.coefficients, FLAGS))
        print(
            f"{engine} {gpu}: {len(points)} runs, coefficients "
            + ", ".join(f"{c:.3g}" for c in full.coefficients),
            file=sys.stderr,
        )
        labels = sorted({p.label for p in points})
        for label in [*labels, f"{engine} {gpu} (all)"]:
            idx = [i for i, p in enumerate(points) if p.label == label or label.endswith("(all)")]
            report[label] = {
                "runs": len(idx),
                "ttft_p50_median_err_in": float(np.median(err_in[idx, 0])),
                "tpot_p50_median_err_in": float(np.median(err_in[idx, 1])),
                "ttft_p50_median_err_cv": float(np.median(cv[idx, 0])),
                "tpot_p50_median_err_cv": float(np.median(cv[idx, 1])),
            }
        priors.append(
            Calibration(
                engine=engine,
                hardware=gpu,
                coefficients=full.coefficients,
                samples=tuple(bootstrap(full, rng, num_samples=40)),
                sigma_ttft=full.sigma_ttft,
                sigma_tpot=full.sigma_tpot,
                source="gpu-runs",
                engine_version=None,
                machine=f"public runs ({args.csv.name})",
                num_points=len(points),
                notes=(
                    "fit by bench/predict_gpu_runs.py on the public AIConfigurator silicon "
                    "sample (closed loops, no prefix reuse)",
                ),
            ).to_json()
        )
    print(f"{'group':44} {'runs':>4} {'TTFT in':>8} {'TPOT in':>8} {'TTFT cv':>8} {'TPOT cv':>8}")
    for label, r in report.items():
        print(
            f"{label:44} {r['runs']:>4} {r['ttft_p50_median_err_in']:>8.1%} "
            f"{r['tpot_p50_median_err_in']:>8.1%} {r['ttft_p50_median_err_cv']:>8.1%} "
            f"{r['tpot_p50_median_err_cv']:>8.1%}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.write_priors:
        out = ROOT / "src/kvroute/predict/priors.json"
        out.write_text(json.dumps({"calibrations": priors}, indent=1) + "\n")
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
