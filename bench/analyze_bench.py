"""Benchmarks for `kvroute analyze` (issue: foundation and analyze).

Run:  .venv/bin/python bench/analyze_bench.py [--quick]

1. Block hashing throughput (16-token blocks, one core) — target >= 20 M tokens/s.
2. Analysis throughput on pre-tokenized prompts, tokenization excluded — target >= 5 M tokens/s.
3. A 1 M-request hash-only trace with Mooncake-like lengths through the real CLI —
   target < 60 s wall and < 4 GB peak RSS.
4. Side by side with `prefixlens` (PyPI, installed into a throwaway venv under
   /tmp/kvroute-bench) on the same pre-tokenized text trace: ideal hit at 16-token
   blocks must agree within 0.1 pp; kvroute should be >= 10x faster.

The machine is shared and noisy: each timing is the median of several runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv" / "bin" / "python"
KVROUTE = ROOT / ".venv" / "bin" / "kvroute"
WORK = Path(os.environ.get("KVROUTE_BENCH_DIR", "/tmp/kvroute-bench"))


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_hashing(repeat: int) -> dict[str, float]:
    from kvroute.trace.hashing import chain_hashes_batch

    rng = np.random.default_rng(0)
    n = 20_000_000
    tokens = rng.integers(0, 49_152, size=n, dtype=np.uint32)
    offsets = np.arange(0, n + 1, 2_000, dtype=np.int64)
    t = median_time(lambda: chain_hashes_batch(tokens, offsets, 16), repeat)
    return {"tokens": n, "seconds": t, "mtok_per_s": n / t / 1e6}


def token_trace(num_requests: int, seed: int = 0) -> list[np.ndarray]:
    """System prompts + multi-turn sessions + unique prompts, ~1.5k tokens each."""
    rng = np.random.default_rng(seed)
    systems = [
        rng.integers(0, 49_152, size=int(rng.integers(300, 1200)), dtype=np.uint32)
        for _ in range(20)
    ]
    sessions: list[np.ndarray] = []
    out = []
    for _ in range(num_requests):
        r = rng.random()
        if r < 0.4 and sessions:
            k = int(rng.integers(0, len(sessions)))
            p = np.concatenate(
                [
                    sessions[k],
                    rng.integers(0, 49_152, size=int(rng.integers(50, 300)), dtype=np.uint32),
                ]
            )
            if p.shape[0] > 6000:
                p = p[:600]
            sessions[k] = p
        elif r < 0.8:
            s = systems[int(rng.integers(0, len(systems)))]
            p = np.concatenate(
                [s, rng.integers(0, 49_152, size=int(rng.integers(100, 900)), dtype=np.uint32)]
            )
            if rng.random() < 0.1:
                sessions.append(p)
        else:
            p = rng.integers(0, 49_152, size=int(rng.integers(200, 3000)), dtype=np.uint32)
        out.append(p)
    return out


def bench_analysis(repeat: int, num_requests: int) -> dict[str, float]:
    from kvroute.analyze.run import analyze_requests
    from kvroute.trace.records import Request, TokenPrompt

    prompts = token_trace(num_requests)
    reqs = [
        Request(prompt=TokenPrompt(p), arrival_s=i * 0.05, session_id=None)
        for i, p in enumerate(prompts)
    ]
    total = int(sum(p.shape[0] for p in prompts))
    result = {}

    def run() -> None:
        result["r"] = analyze_requests(
            reqs, trace_path="bench", trace_format="tokens", tokenizer_name=None
        )

    t = median_time(run, repeat)
    r = result["r"]
    return {
        "requests": num_requests,
        "tokens": total,
        "seconds": t,
        "mtok_per_s": total / t / 1e6,
        "hit_ratio": r.overlap.hit_ratio,
    }  # type: ignore[attr-defined]


def mooncake_file(path: Path, num_requests: int, seed: int = 1) -> None:
    """Mooncake-like: lognormal input lengths (median ~6k tokens), 512-token blocks,
    40 % continuing a session, 40 % behind one of 200 shared prefixes, 20 % fresh."""
    rng = np.random.default_rng(seed)
    next_id = 0
    prefixes = []
    for _ in range(200):
        n = int(rng.integers(1, 8))
        prefixes.append(list(range(next_id, next_id + n)))
        next_id += n
    sessions: list[list[int]] = []
    t = 0.0
    with path.open("wb") as f:
        for _ in range(num_requests):
            t += float(rng.exponential(20.0))
            input_len = int(min(max(rng.lognormal(np.log(6000), 0.8), 64), 128_000))
            nb = -(-input_len // 512)
            r = rng.random()
            if r < 0.4 and sessions:
                k = int(rng.integers(0, len(sessions)))
                base = sessions[k][: nb - 1]
            elif r < 0.8:
                base = prefixes[int(rng.integers(0, len(prefixes)))][: nb - 1]
            else:
                base = []
            ids = base + list(range(next_id, next_id + nb - len(base)))
            next_id += nb - len(base)
            if r < 0.8 and rng.random() < 0.3:
                if len(sessions) < 5000:
                    sessions.append(ids)
                else:
                    sessions[int(rng.integers(0, 5000))] = ids
            rec = {
                "timestamp": int(t),
                "input_length": input_len,
                "output_length": int(rng.integers(10, 600)),
                "hash_ids": ids,
            }
            f.write(orjson.dumps(rec) + b"\n")


def bench_mooncake(num_requests: int) -> dict[str, float]:
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"mooncake-{num_requests}.jsonl"
    if not path.exists():
        mooncake_file(path, num_requests)
    out = WORK / "mooncake-result.json"
    cmd = [
        "/usr/bin/time",
        "-f",
        "%e %M",
        str(KVROUTE),
        "analyze",
        str(path),
        "-q",
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall_s, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    res = json.loads(out.read_text())
    return {
        "requests": num_requests,
        "file_mb": path.stat().st_size / 1e6,
        "wall_s": float(wall_s),
        "peak_rss_gb": int(rss_kb) / 1e6,
        "hit_ratio": res["overlap"]["hit_ratio"],
        "reuse_sample_rate": res["reuse"]["sample_rate"],
    }


def prefixlens_python() -> Path:
    venv = WORK / "prefixlens-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "prefixlens==0.1.0"], check=True)
    return py


def bench_prefixlens(num_requests: int, repeat: int) -> dict[str, float]:
    """Same token ids to both tools; infinite capacity for prefixlens (its LRU never evicts)."""
    from kvroute.trace.readers import read_trace
    from kvroute.trace.synthetic import sample_log
    from kvroute.trace.tokenize import tokenize_requests

    WORK.mkdir(parents=True, exist_ok=True)
    text_log = WORK / "pl-text.jsonl"
    text_log.write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in sample_log(num_requests, seed=5))
    )
    toks = [r.prompt.token_ids for r in tokenize_requests(read_trace(text_log), None, workers=2)]  # type: ignore[union-attr]
    ours = WORK / "pl-ours.jsonl"
    theirs = WORK / "pl-theirs.jsonl"
    ours.write_bytes(b"".join(orjson.dumps({"prompt": t.tolist()}) + b"\n" for t in toks))
    theirs.write_bytes(
        b"".join(
            orjson.dumps({"request_id": str(i), "token_ids": t.tolist()}) + b"\n"
            for i, t in enumerate(toks)
        )
    )
    py = prefixlens_python()
    pl_cmd = [
        str(py.parent / "prefixlens"),
        "analyze",
        str(theirs),
        "--block-size",
        "16",
        "--capacity-blocks",
        str(10**12),
        "--json",
    ]
    kv_out = WORK / "pl-kvroute.json"
    kv_cmd = [str(KVROUTE), "analyze", str(ours), "-q", "--json", str(kv_out)]
    pl_times, kv_times = [], []
    pl_stdout = ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        pl_stdout = subprocess.run(pl_cmd, capture_output=True, text=True, check=True).stdout
        pl_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run(kv_cmd, capture_output=True, text=True, check=True)
        kv_times.append(time.perf_counter() - t0)
    pl = json.loads(pl_stdout)
    pl_hit = pl["hit_rate"]
    kv = json.loads(kv_out.read_text())
    full_blocks = sum(int(t.shape[0]) // 16 for t in toks)
    kv_hit_blocks = kv["overlap"]["block_reusable_tokens"] / 16 / full_blocks
    return {
        "requests": num_requests,
        "tokens": int(sum(int(t.shape[0]) for t in toks)),
        "prefixlens_hit": pl_hit,
        "kvroute_hit_same_definition": kv_hit_blocks,
        "diff_pp": abs(pl_hit - kv_hit_blocks) * 100,
        "kvroute_token_level_hit": kv["overlap"]["hit_ratio"],
        "prefixlens_s": statistics.median(pl_times),
        "kvroute_s": statistics.median(kv_times),
        "speedup": statistics.median(pl_times) / statistics.median(kv_times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke)")
    ap.add_argument("--only", choices=["hashing", "analysis", "mooncake", "prefixlens"])
    args = ap.parse_args()
    repeat = 3 if args.quick else 5
    results: dict[str, dict[str, float]] = {}
    if args.only in (None, "hashing"):
        results["hashing"] = bench_hashing(repeat)
    if args.only in (None, "analysis"):
        results["analysis"] = bench_analysis(3, 2_000 if args.quick else 20_000)
    if args.only in (None, "prefixlens"):
        results["prefixlens"] = bench_prefixlens(300 if args.quick else 20_000, 3)
    if args.only in (None, "mooncake"):
        results["mooncake"] = bench_mooncake(50_000 if args.quick else 1_000_000)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
