"""Does `kvroute advise` pick the engine `kvroute bench` measured best? Offline, on the seed runs.

For each seed-experiment workload (bench/seed_experiments.py: rag, multiturn, agent,
json, code; llama-server vs vLLM-CPU, 12 requests, 1 and 4 users), regenerate the same
requests (same parameters, seed 0), advise on them with the testbed's engine settings
(llama.cpp 4 slots, no host-RAM cache; vLLM 32-token blocks, 4 sequences; SmolLM2 on the
CPU, 1 GiB KV), and compare with what the bench measured on the real engines
(bench/seed_results/<workload>.json):

- the engine advise gives the workload's largest class, against the measured winner on
  TTFT p99 and on engine-reported cache hit, at each load;
- each engine's predicted prefill saved against its engine-reported hit.

    .venv/bin/python bench/advise_agreement.py [--json bench/advise_agreement_results.json]

Honest limits: 12 requests per workload (classes this small keep the incumbent unless
told otherwise, so the minimum is lowered to 1 here), and the replay spaces requests by
their generated offsets, not the bench's closed loop of 1 or 4 users.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from kvroute.advise.hardware import resolve_hardware  # noqa: E402
from kvroute.advise.hit_evidence import HitEvidence  # noqa: E402
from kvroute.advise.options import AdviseOptions, Ops, Team  # noqa: E402
from kvroute.advise.run import TraceSourceInfo, advise  # noqa: E402
from kvroute.advise.workload import classify_trace  # noqa: E402
from kvroute.bench.workloads.export import trace_requests  # noqa: E402
from kvroute.bench.workloads.registry import generate  # noqa: E402
from kvroute.cache.capacity import resolve_model  # noqa: E402
from kvroute.cache.models.llamacpp import LlamaCppConfig  # noqa: E402
from kvroute.cache.models.vllm import VllmConfig  # noqa: E402
from kvroute.cache.registry import EngineSettings  # noqa: E402
from kvroute.trace.tokenize import tokenize_requests  # noqa: E402
from kvroute.trace.tokenizer import load_tokenizer  # noqa: E402
from seed_experiments import WORKLOADS  # noqa: E402

TESTBED = EngineSettings(
    llamacpp=LlamaCppConfig(num_slots=4, cache_ram_mib=0),
    vllm=VllmConfig(block_size_tokens=32, max_num_seqs=4),
)
ENGINES = ("llamacpp", "vllm")


def measured(workload: str) -> dict[tuple[str, int], dict[str, float]]:
    doc = json.loads((ROOT / "bench" / "seed_results" / f"{workload}.json").read_text())
    out = {}
    for run in doc["runs"]:
        name = run["endpoint"] if isinstance(run["endpoint"], str) else run["endpoint"]["name"]
        s = run["summary"]
        out[(name, int(run["load"]["concurrency"]))] = {
            "ttft_p99_s": s["ttft_s"]["p99"],
            "engine_hit": s["cache"]["engine_hit_rate"],
        }
    return out


def one(workload: str, num_requests: int) -> dict[str, Any]:
    tokenizer = load_tokenizer(None)
    generated = generate(workload, num_requests, tokenizer, seed=0, params=WORKLOADS[workload])
    raw = trace_requests(generated)
    labels = classify_trace(raw)
    requests = list(tokenize_requests(raw, None, workers=1))
    hardware = resolve_hardware(resolve_model("smollm2-135m"), "cpu", cpu_kv_gib=1.0)
    evidence = HitEvidence(settings=TESTBED)
    options = AdviseOptions(
        team=Team(3, Ops.MEDIUM), engines=ENGINES, min_trace_requests=1, min_class_requests=1
    )
    started = time.perf_counter()
    advice = advise(
        requests,
        labels,
        TraceSourceInfo(workload, "bench", tokenizer.name),
        hardware,
        options,
        evidence,
        [],
    )
    elapsed = time.perf_counter() - started
    main = max(advice.classes, key=lambda d: d.num_requests)
    predicted = {e: evidence.figures(requests, e, hardware).value for e in ENGINES}
    runs = measured(workload)
    loads = sorted({load for _, load in runs})
    rows = []
    for load in loads:
        ttft = {e: runs[(e, load)]["ttft_p99_s"] for e in ENGINES}
        hit = {e: runs[(e, load)]["engine_hit"] for e in ENGINES}
        rows.append(
            {
                "users": load,
                "best_ttft_p99": min(ttft, key=lambda e: ttft[e]),
                "best_hit": max(hit, key=lambda e: hit[e]),
                "ttft_p99_s": ttft,
                "engine_hit": hit,
            }
        )
    return {
        "workload": workload,
        "classes": {d.workload: d.engine for d in advice.classes},
        "main_class": main.workload,
        "advised": main.engine,
        "headline": main.headline,
        "predicted_hit": predicted,
        "measured": rows,
        "advise_s": round(elapsed, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--num-requests", type=int, default=12)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = [one(w, args.num_requests) for w in WORKLOADS]
    agree_ttft = agree_hit = total = 0
    errors = []
    print(
        f"{'workload':10} {'class':10} {'advised':8} {'users':>5} {'best TTFT p99':>14} {'best hit':>9}  predicted vs measured hit"
    )
    for r in results:
        for row in r["measured"]:
            total += 1
            agree_ttft += row["best_ttft_p99"] == r["advised"]
            agree_hit += row["best_hit"] == r["advised"]
            pairs = ", ".join(
                f"{e} {r['predicted_hit'][e]:.1%}/{row['engine_hit'][e]:.1%}" for e in ENGINES
            )
            errors.extend(abs(r["predicted_hit"][e] - row["engine_hit"][e]) for e in ENGINES)
            print(
                f"{r['workload']:10} {r['main_class']:10} {r['advised']:8} {row['users']:>5} "
                f"{row['best_ttft_p99']:>14} {row['best_hit']:>9}  {pairs}"
            )
    summary = {
        "agree_ttft_p99": f"{agree_ttft}/{total}",
        "agree_hit": f"{agree_hit}/{total}",
        "mean_abs_hit_error_pp": round(100 * sum(errors) / len(errors), 2),
    }
    print(json.dumps(summary))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"summary": summary, "workloads": results}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
