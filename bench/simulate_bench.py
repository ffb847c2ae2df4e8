"""Benchmarks and exactness checks for `kvroute simulate` (issue: simulate, part 1).

Run:  .venv/bin/python bench/simulate_bench.py [--quick] [--only exactness|hash|token]

1. Exactness: with an unbounded pool and outputs not cached, SGLang (page 1) equals the
   token-level ideal of `kvroute analyze` minus one token per fully repeated prompt, and
   vLLM the 16-token block-level ideal minus one block per fully repeated block-aligned
   prompt, per request and in total; the same on a hash-only trace. Two runs are equal.
2. Hash-only speed: a Mooncake-like trace (~30 blocks of 512 tokens per request, shared
   system prompts, multi-turn sessions) replayed in time through each model — target
   >= 50k requests/s per model. Reported at a tight and a roomy pool.
3. Token-level speed: 100k requests of 2k-token prompts through each model — target
   < 60 s per model (`--quick`: 10k requests, extrapolated).

The replay runs compiled when ``scripts/build-native`` has built it for the current
sources (``"build"`` in the output says which); ``KVROUTE_NATIVE=0`` times the Python
sources instead. Each timing is the median of several runs (one run for the large token trace) and counts
the process's CPU time (``time.process_time``), not wall time: the machine is shared, and
under load wall time mostly measures the neighbours. Wall seconds are reported next to it.
Timings include building the hashed sequences.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvroute import _accel  # noqa: E402

_accel.enable()  # before the cache models are imported
from kvroute.analyze.prefix_index import lcp_tokens_bruteforce  # noqa: E402
from kvroute.analyze.run import analyze_requests  # noqa: E402
from kvroute.cache.base import CacheGeometry  # noqa: E402
from kvroute.cache.registry import cache_models  # noqa: E402
from kvroute.cache.replay.loop import ReplayOutcome, replay  # noqa: E402
from kvroute.cache.replay.timing import TimingOptions, plan  # noqa: E402
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt  # noqa: E402

ENGINES = ("llamacpp", "vllm", "sglang")


def hash_trace(n: int, seed: int = 0, block: int = 512) -> list[Request]:
    """Mooncake-like: 50 system prompts of 10-30 blocks, user turns of 5-20 blocks, 40 %
    follow-ups that extend an earlier conversation; ~30 blocks per request. Ids are
    content-consistent: a partial last block gets an id of its own (its content differs
    from any full block), as in Mooncake and kvroute captures."""
    rng = np.random.default_rng(seed)
    next_id = 1
    systems = []
    for _ in range(50):
        k = int(rng.integers(10, 30))
        systems.append(np.arange(next_id, next_id + k, dtype=np.uint64))
        next_id += k
    sessions: list[np.ndarray] = []
    out = []
    t = 0.0
    for _ in range(n):
        t += float(rng.exponential(0.02))
        if rng.random() < 0.4 and sessions:
            j = int(rng.integers(0, len(sessions)))
            k = int(rng.integers(2, 8))
            full = np.concatenate([sessions[j], np.arange(next_id, next_id + k, dtype=np.uint64)])
            next_id += k
            if full.shape[0] > 60:
                full = full[:25]
            sessions[j] = full
        else:
            k = int(rng.integers(5, 20))
            full = np.concatenate(
                [
                    systems[int(rng.integers(0, 50))],
                    np.arange(next_id, next_id + k, dtype=np.uint64),
                ]
            )
            next_id += k
            if rng.random() < 0.3:
                sessions.append(full)
                if len(sessions) > 5000:
                    sessions.pop(0)
        tail = int(rng.integers(0, block))
        ids = full
        if tail:
            ids = np.append(full, np.uint64(next_id))
            next_id += 1
        out.append(
            Request(
                prompt=BlockPrompt(ids, block, full.shape[0] * block + tail),
                arrival_s=t,
                end_s=t + float(rng.exponential(3.0)),
                output_len=int(rng.integers(20, 500)),
            )
        )
    return out


def token_trace(n: int, seed: int = 0, length: int = 2000) -> list[Request]:
    """2k-token prompts: 20 system prompts of 200-1200 tokens, 30 % follow-ups."""
    rng = np.random.default_rng(seed)
    systems = [
        rng.integers(0, 49_152, size=int(rng.integers(200, 1200)), dtype=np.uint32)
        for _ in range(20)
    ]
    sessions: list[np.ndarray] = []
    out = []
    t = 0.0
    for _ in range(n):
        t += float(rng.exponential(0.02))
        if rng.random() < 0.3 and sessions:
            k = int(rng.integers(0, len(sessions)))
            p = np.concatenate(
                [sessions[k][: length - 200], rng.integers(0, 49_152, size=200, dtype=np.uint32)]
            )
            sessions[k] = p
        else:
            s = systems[int(rng.integers(0, 20))]
            p = np.concatenate(
                [s, rng.integers(0, 49_152, size=length - s.shape[0], dtype=np.uint32)]
            )
            if rng.random() < 0.1:
                sessions.append(p)
        out.append(
            Request(prompt=TokenPrompt(p), arrival_s=t, output_len=int(rng.integers(20, 300)))
        )
    return out


def small_token_trace(n: int, seed: int = 1) -> list[Request]:
    """Short prompts with exact repeats, for the brute-force exactness check."""
    rng = np.random.default_rng(seed)
    systems = [
        rng.integers(0, 300, size=int(rng.integers(16, 80)), dtype=np.uint32) for _ in range(5)
    ]
    out: list[Request] = []
    for i in range(n):
        if i % 13 == 0 and out:
            prev = out[int(rng.integers(0, len(out)))].prompt
            assert isinstance(prev, TokenPrompt)
            p = prev.token_ids.copy()
        else:
            p = np.concatenate(
                [
                    systems[int(rng.integers(0, 5))],
                    rng.integers(0, 300, size=int(rng.integers(0, 50)), dtype=np.uint32),
                ]
            )
        out.append(
            Request(prompt=TokenPrompt(p), arrival_s=i * 0.1, output_len=int(rng.integers(1, 50)))
        )
    return out


def run(
    requests: list[Request],
    engine: str,
    capacity: int | None,
    block: int | None,
    *,
    cache_outputs: bool = True,
) -> ReplayOutcome:
    return timed_run(requests, engine, capacity, block, cache_outputs=cache_outputs)[0]


def timed_run(
    requests: list[Request],
    engine: str,
    capacity: int | None,
    block: int | None,
    *,
    cache_outputs: bool = True,
) -> tuple[ReplayOutcome, float]:
    """The outcome and the CPU seconds the replay took."""
    timing = TimingOptions()
    schedule = plan(requests, timing)
    model = cache_models().get(engine)(CacheGeometry(capacity, block, 131_072))
    gc.collect()  # the previous run's model is garbage: free it outside the timing
    cpu = time.process_time()
    out = replay(requests, model, schedule, timing, cache_outputs=cache_outputs)
    return out, time.process_time() - cpu


def median_rate(
    fn: Callable[[], tuple[ReplayOutcome, float]], n: int, repeat: int
) -> tuple[float, float, ReplayOutcome]:
    """Median requests per CPU second and per wall second, and the last outcome."""
    rates, walls, last = [], [], None
    for _ in range(repeat):
        last, cpu_s = fn()
        rates.append(n / cpu_s)
        walls.append(n / last.elapsed_s)
    assert last is not None
    return statistics.median(rates), statistics.median(walls), last


def exactness(n: int) -> dict[str, object]:
    reqs = small_token_trace(n)
    lengths = np.array([r.prompt.num_tokens for r in reqs if isinstance(r.prompt, TokenPrompt)])
    prompts = [r.prompt.token_ids for r in reqs if isinstance(r.prompt, TokenPrompt)]
    lcp = np.array(lcp_tokens_bruteforce(prompts))
    ideal = analyze_requests(
        reqs, trace_path="bench", trace_format="bench", tokenizer_name=None
    ).overlap
    sg = run(reqs, "sglang", None, None, cache_outputs=False)
    vl = run(reqs, "vllm", None, None, cache_outputs=False)
    full = int(np.sum(lcp == lengths))
    capped = int(np.sum((lcp == lengths) & (lengths % 16 == 0)))
    sg2 = run(reqs, "sglang", 4000, None)
    sg3 = run(reqs, "sglang", 4000, None)
    hreqs = hash_trace(2000)
    hideal = analyze_requests(
        hreqs, trace_path="bench", trace_format="bench", tokenizer_name=None
    ).overlap
    hsg = run(hreqs, "sglang", None, 512, cache_outputs=False)
    hvl = run(hreqs, "vllm", None, 512, cache_outputs=False)
    hlen = np.array([r.prompt.num_tokens for r in hreqs if isinstance(r.prompt, BlockPrompt)])
    repeats = _hash_full_repeats(hreqs)
    return {
        "requests": n,
        "sglang_per_request_equal": bool(
            np.array_equal(sg.cached_tokens, np.minimum(lcp, lengths - 1))
        ),
        "sglang_total": int(sg.cached_tokens.sum()),
        "ideal_token_reusable_minus_full_repeats": ideal.reusable_tokens - full,
        "vllm_per_request_equal": bool(
            np.array_equal(vl.cached_tokens, 16 * np.minimum(lcp // 16, (lengths - 1) // 16))
        ),
        "vllm_total": int(vl.cached_tokens.sum()),
        "ideal_block_reusable_minus_capped_blocks": ideal.block_reusable_tokens - 16 * capped,
        "hash_only_sglang_total": int(hsg.cached_tokens.sum()),
        "hash_only_ideal_minus_full_repeats": hideal.reusable_tokens - len(repeats),
        "hash_only_vllm_total": int(hvl.cached_tokens.sum()),
        "hash_only_block_ideal_minus_capped_blocks": hideal.block_reusable_tokens
        - 512 * sum(1 for i in repeats if hlen[i] % 512 == 0),
        "deterministic": bool(
            np.array_equal(sg2.cached_tokens, sg3.cached_tokens) and sg2.stats == sg3.stats
        ),
    }


def _hash_full_repeats(reqs: list[Request]) -> list[int]:
    """Indices of requests whose whole prompt (all its blocks) an earlier one already had."""
    seen: set[tuple[int, ...]] = set()
    full = []
    for i, r in enumerate(reqs):
        assert isinstance(r.prompt, BlockPrompt)
        ids = tuple(r.prompt.block_hashes.tolist())
        if ids in seen:
            full.append(i)
        seen.update(ids[:k] for k in range(1, len(ids) + 1))
    return full


def hash_speed(n: int, repeat: int) -> dict[str, object]:
    reqs = hash_trace(n)
    blocks = float(
        np.mean([r.prompt.block_hashes.shape[0] for r in reqs if isinstance(r.prompt, BlockPrompt)])
    )
    out: dict[str, object] = {"requests": n, "blocks_per_request": round(blocks, 1)}
    for label, cap in (("tight_2M_tokens", 2_000_000), ("roomy_64M_tokens", 64_000_000)):
        for engine in ENGINES:
            rate, wall, o = median_rate(
                lambda e=engine, c=cap: timed_run(reqs, e, c, 512), n, repeat
            )
            out[f"{engine}@{label}"] = {
                "req_per_cpu_s": round(rate),
                "req_per_wall_s": round(wall),
                "hit_ratio": round(int(o.cached_tokens.sum()) / int(o.prompt_tokens.sum()), 4),
                "evicted_tokens": o.stats.evicted_tokens,
            }
    return out


def token_speed(n: int, target: int) -> dict[str, object]:
    t0 = time.perf_counter()
    reqs = token_trace(n)
    out: dict[str, object] = {
        "requests": n,
        "prompt_tokens": n * 2000,
        "build_s": round(time.perf_counter() - t0, 1),
    }
    for engine in ENGINES:
        o, cpu_s = timed_run(reqs, engine, 1_000_000, None)
        out[engine] = {
            "cpu_seconds": round(cpu_s, 1),
            "wall_seconds": round(o.elapsed_s, 1),
            f"cpu_seconds_for_{target:,}_requests": round(cpu_s * target / n, 1),
            "hit_ratio": round(int(o.cached_tokens.sum()) / int(o.prompt_tokens.sum()), 4),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller traces (extrapolated)")
    ap.add_argument("--only", choices=["exactness", "hash", "token"], help="one part only")
    args = ap.parse_args()
    parts: dict[str, Callable[[], dict[str, object]]] = {
        "exactness": lambda: exactness(400),
        "hash": lambda: hash_speed(20_000 if args.quick else 50_000, 3),
        "token": lambda: token_speed(10_000 if args.quick else 100_000, 100_000),
    }
    results: dict[str, object] = {
        "build": _accel.status("cache")[1] if _accel.active("cache") else "python"
    }
    results.update({name: fn() for name, fn in parts.items() if args.only in (None, name)})
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
