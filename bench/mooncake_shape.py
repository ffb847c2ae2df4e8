"""A generated stand-in for Mooncake's 12k-request conversation trace (FAST'25).

The real trace (``conversation_trace.jsonl`` of kvcache-ai/Mooncake, 12,031 requests over
one hour) is not on this machine. This generator matches what is published about it and
what the issue measured on it, so sweep timings and curves have the same shape:

- 12,031 requests, timestamps in milliseconds over 3,600 s;
- ``hash_ids`` of 512-token blocks, ``len(hash_ids) == ceil(input_length / 512)``, ids
  allocated consecutively as new content appears (equal ids = equal prefixes);
- mean input about 12 k tokens with a long tail (up to 128 k), mean output about 343;
- a few system prompts, one of them (id 0 first) shared by most requests: nearly every
  prompt starts with the same block, as in the published traces;
- multi-turn conversations: a turn's prompt is the previous prompt, the previous answer
  and a new message, so it reuses the previous prompt's full blocks; turns minutes apart,
  so the reuse distance is millions of tokens (the issue puts the knee of the hit vs
  capacity curve at 2-16 Mi tokens and the unbounded ideal near 37 %).

Run ``python bench/mooncake_shape.py OUT.jsonl`` to write it (``--seed``, ``-n``); the
summary it prints is what to compare with the real trace's figures.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

BLOCK = 512
NUM_REQUESTS = 12_031
DURATION_MS = 3_600_000
MAX_INPUT = 128_000


def generate(n: int = NUM_REQUESTS, seed: int = 0) -> list[dict[str, Any]]:
    """Mooncake records (``timestamp``, ``input_length``, ``output_length``, ``hash_ids``),
    in arrival order."""
    rng = np.random.default_rng(seed)
    next_id = 0

    def fresh(k: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + k))
        next_id += k
        return ids

    # System prompts: the first is shared by most conversations.
    systems = [fresh(int(rng.integers(2, 7))) for _ in range(12)]
    weights = np.array([0.62] + [0.38 / 11] * 11)
    # Conversations start as a Poisson process; each has a geometric number of turns.
    mean_turns = 1.4
    num_sessions = int(n / mean_turns * 1.5)
    starts = rng.uniform(0, DURATION_MS * 0.98, num_sessions)
    turns = rng.geometric(1 / mean_turns, num_sessions)
    per_session: list[list[float]] = []
    for t0, k in zip(starts, turns, strict=True):
        times = [float(t0)]
        for _ in range(1, int(k)):
            nxt = times[-1] + float(rng.exponential(300_000.0)) + 5_000.0
            if nxt >= DURATION_MS:
                break
            times.append(nxt)
        per_session.append(times)
    # Exactly n requests: drop whole conversations at random, then last turns.
    total = sum(len(t) for t in per_session)
    for s in rng.permutation(len(per_session)):
        if total - len(per_session[s]) < n:
            continue
        total -= len(per_session[s])
        per_session[s] = []
    while total > n:
        s = int(rng.integers(len(per_session)))
        if len(per_session[s]) > 1:
            per_session[s].pop()
            total -= 1
    events = [(t, s, i) for s, times in enumerate(per_session) for i, t in enumerate(times)]
    ordered = sorted(events)
    # Each session's history: full-block ids so far and its length in tokens.
    history: dict[int, tuple[list[int], int]] = {}
    out = []
    for t, s, _turn in ordered:
        if s not in history:
            sys_ids = systems[int(rng.choice(len(systems), p=weights))]
            user = int(min(rng.lognormal(math.log(6_000), 0.9), MAX_INPUT))
            full, length = list(sys_ids), len(sys_ids) * BLOCK
            add = user
        else:
            full, length = history[s]
            add = int(rng.lognormal(math.log(900), 1.0)) + 1
        new_len = min(length + add, MAX_INPUT)
        # Blocks of the history that were full stay; the rest of the prompt is new content.
        keep = min(len(full), length // BLOCK, new_len // BLOCK)
        ids = full[:keep] + fresh(math.ceil(new_len / BLOCK) - keep)
        output = int(min(max(rng.lognormal(math.log(250), 0.8), 1), 4_000))
        out.append(
            {
                "timestamp": int(t),
                "input_length": new_len,
                "output_length": output,
                "hash_ids": ids,
            }
        )
        # The next turn sees this prompt and its answer.
        nxt = min(new_len + output, MAX_INPUT)
        history[s] = (ids[: new_len // BLOCK], nxt)
    return out


def write(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def summary(records: list[dict[str, Any]]) -> dict[str, float]:
    inputs = np.array([r["input_length"] for r in records], dtype=np.float64)
    outputs = np.array([r["output_length"] for r in records], dtype=np.float64)
    firsts = [r["hash_ids"][0] for r in records if r["hash_ids"]]
    return {
        "requests": len(records),
        "duration_s": (records[-1]["timestamp"] - records[0]["timestamp"]) / 1000,
        "mean_input": float(inputs.mean()),
        "median_input": float(np.median(inputs)),
        "max_input": float(inputs.max()),
        "mean_output": float(outputs.mean()),
        "share_first_block_0": firsts.count(0) / len(firsts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("-n", type=int, default=NUM_REQUESTS)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    records = generate(args.n, args.seed)
    write(args.out, records)
    print(json.dumps(summary(records), indent=2))


if __name__ == "__main__":
    main()
