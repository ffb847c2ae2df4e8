"""Does `-p prompt_tokens=N` give a mean prompt of N? rag and json at 256 and 1,024
tokens, 8 and 50 requests, at their default overlap and at 0.9 (results in
bench/RESULTS.md):

    python bench/workload_prompt_mean.py
"""

from __future__ import annotations

import numpy as np

from kvroute.bench.workloads.export import analyze_workload
from kvroute.bench.workloads.registry import generate
from kvroute.errors import UsageError
from kvroute.trace.tokenizer import load_tokenizer


def main() -> None:
    tok = load_tokenizer()
    print("| workload | prompt_tokens | -n | overlap | mean prompt | off by | ideal overlap |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name in ("rag", "json"):
        for target in (256, 1024):
            for n in (8, 50):
                for overlap in (None, "0.9"):
                    params = {"prompt_tokens": str(target)}
                    if overlap is not None:
                        params["overlap"] = overlap
                    cells = f"| {name} | {target} | {n} | {overlap or 'default'} |"
                    try:
                        reqs = generate(name, n, tok, seed=3, params=params)
                    except UsageError as exc:
                        print(f"{cells} refused: {exc.message.split(':')[1].strip()} | | |")
                        continue
                    mean = float(np.mean([r.prompt_tokens for r in reqs]))
                    hit = analyze_workload(reqs, tok).overlap.hit_ratio
                    print(f"{cells} {mean:.0f} | {mean / target - 1:+.1%} | {hit:.1%} |")


if __name__ == "__main__":
    main()
