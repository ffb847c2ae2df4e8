"""Cache-breaker detection on logs with known planted breakers and on healthy logs.

For each planted kind (kvroute/trace/planted.py) and seed: is a finding of that kind
reported (recall), are findings of other kinds reported (false findings), and how close
is the predicted "after fix" ideal hit to the ideal hit of the log fixed by hand.
Healthy logs (the planted generator with nothing planted, kvroute's own sample log,
and the ``kvroute bench`` workloads) must give no finding at all. Prints a table and writes bench/breakers_results.json.

    .venv/bin/python bench/breakers_bench.py [--seeds 2] [--requests 240]
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path
from typing import Any

from kvroute.analyze.breaker_cost import ideal_hit_ratio, measure_breakers
from kvroute.bench.workloads.registry import generate
from kvroute.trace.planted import PLANTED_KINDS, as_requests, planted_logs, with_tools_template
from kvroute.trace.records import ChatPrompt, Prompt, TextPrompt
from kvroute.trace.synthetic import sample_log
from kvroute.trace.tokenize import encode_prompt
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer

HEALTHY_WORKLOADS = ("mix", "agent", "rag", "multiturn", "json", "code", "qa")
"""``kvroute bench`` workloads: generated traffic with no breaker planted."""


def _workload_log(name: str, tok: ChatTokenizer, seed: int) -> list[dict[str, Any]]:
    """A ``kvroute bench`` workload's requests as an OpenAI request log."""
    return [
        {"session_id": r.session_id, "request": dict(r.body)}
        for r in generate(name, 200, tok, seed=seed)
    ]


def _text_prompt(p: Prompt) -> ChatPrompt | TextPrompt:
    assert isinstance(p, ChatPrompt | TextPrompt)
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--out", default=str(Path(__file__).with_name("breakers_results.json")))
    args = ap.parse_args()
    base = load_tokenizer(None)
    tok = with_tools_template(base)
    encode = partial(encode_prompt, tok)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    cases: list[tuple[str, int, list[dict[str, Any]], list[dict[str, Any]] | None]] = []
    for seed in range(args.seeds):
        for kind in PLANTED_KINDS:
            logs = planted_logs(kind, args.requests, seed=seed)
            cases.append((kind, seed, logs.broken, logs.fixed))
        cases.append(("none", seed, planted_logs("none", args.requests, seed=seed).broken, None))
        cases.append(("sample", seed, list(sample_log(600, seed=seed)), None))
        for name in HEALTHY_WORKLOADS:
            cases.append((f"bench:{name}", seed, _workload_log(name, base, seed), None))
    for kind, seed, broken, fixed in cases:
        reqs = as_requests(broken)
        t0 = time.perf_counter()
        res = measure_breakers(reqs, None, encode)
        took = time.perf_counter() - t0
        kinds = [f.kind.value for f in res.findings]
        hit = [f for f in res.findings if f.kind.value == kind]
        row: dict[str, Any] = {
            "planted": kind,
            "seed": seed,
            "num_requests": len(reqs),
            "found_kinds": kinds,
            "detected": bool(hit),
            "false_findings": sum(1 for k in kinds if k != kind),
            "ideal_before": res.ideal_hit_before,
            "breakers_s": took,
        }
        if fixed is not None:
            fixed_ids = [encode(_text_prompt(r.prompt)) for r in as_requests(fixed)]
            row["ideal_fixed_trace"] = ideal_hit_ratio(fixed_ids)
            row["predicted_after"] = hit[0].ideal_hit_after if hit else None
            row["predicted_after_all"] = res.ideal_hit_after_all
            if hit:
                row["error_pp"] = 100 * (hit[0].ideal_hit_after - row["ideal_fixed_trace"])
        rows.append(row)
        print(
            f"{kind:20s} seed {seed}  found {kinds}  before {res.ideal_hit_before:6.1%}"
            + (
                f"  predicted {row['predicted_after']:.1%}  fixed trace {row['ideal_fixed_trace']:.1%}"
                if row.get("predicted_after") is not None
                else ""
            )
            + f"  ({took:.2f} s)"
        )
    healthy_names = ("none", "sample", *(f"bench:{n}" for n in HEALTHY_WORKLOADS))
    planted = [r for r in rows if r["planted"] not in healthy_names]
    healthy = [r for r in rows if r["planted"] in healthy_names]
    errors = [abs(r["error_pp"]) for r in planted if "error_pp" in r]
    summary = {
        "recall": sum(r["detected"] for r in planted) / len(planted),
        "false_findings_on_planted": sum(r["false_findings"] for r in planted),
        "findings_on_healthy": sum(len(r["found_kinds"]) for r in healthy),
        "max_after_fix_error_pp": max(errors) if errors else None,
        "num_planted_traces": len(planted),
        "num_healthy_traces": len(healthy),
        "elapsed_s": time.perf_counter() - started,
    }
    print(json.dumps(summary, indent=2))
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
