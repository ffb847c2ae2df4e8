"""Fidelity of the cache models against real engines (issue: simulate, part 5).

Run:  .venv/bin/python bench/simulate_fidelity.py [--engines llamacpp,vllm]
          [--shapes NAME,...] [--concurrency 1,4] [--llamacpp-url URL] [--vllm-url URL]
          [--out-dir DIR]

Five workload shapes, written as OpenAI request logs (the format `kvroute simulate`
reads), are each served on llama-server and vLLM-CPU (started here unless a URL is given:
4 slots/sequences x 2048 tokens, vLLM eager with 32-token blocks) in a closed loop of 1
and of 4 clients, greedy, 8 output tokens. Each run goes through
`kvroute.validate.run.validate`: reset the cache, serve, read the per-response cached
tokens and the /metrics deltas, replay the engine's model with the engine's settings over
the run as it happened, compare.

Targets: overall hit-ratio error, mean of |predicted - measured| over the shape x
concurrency runs, <= 0.5 pp against vLLM-CPU and <= 1 pp against llama-server.

Shapes (prompts tokenized with SmolLM2's tokenizer and chat template):
  system_prompt    one long system prompt, varied questions (chat)
  multi_turn       10 sessions x 6 turns, interleaved, each turn carrying its history (chat)
  agent_loop       8 agents x 7 steps over a shared system prompt with a tool schema:
                   Action / Observation turns appended step by step (chat)
  many_prefixes    6 distinct long system prompts (more than the 4 slots), round-robin (chat)
  code_completion  code up to a cursor: mostly distinct files, some revisited further on,
                   30 % sharing an ~80-token header (completions)
Writes the traces, per run the validation JSON and the answers (`*.served.json`, enough to
predict again offline after a model change: --offline), and `simulate_fidelity.json`
under --out-dir (default: $TMPDIR/kvroute-simulate-fidelity).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvroute.cache.registry import EngineSettings  # noqa: E402
from kvroute.engines.base import CacheCounters  # noqa: E402
from kvroute.engines.launch import LaunchOptions  # noqa: E402
from kvroute.engines.local import LocalEngines  # noqa: E402
from kvroute.engines.process import Lifetime  # noqa: E402
from kvroute.engines.registry import make_adapter  # noqa: E402
from kvroute.engines.state import StateDir  # noqa: E402
from kvroute.engines.vllm_paths import vllm_model_dir  # noqa: E402
from kvroute.trace.formats.base import ReadOptions  # noqa: E402
from kvroute.trace.readers import read_trace  # noqa: E402
from kvroute.trace.records import Request, TextPrompt, TokenPrompt  # noqa: E402
from kvroute.trace.tokenize import tokenize_requests  # noqa: E402
from kvroute.validate.compare import compare  # noqa: E402
from kvroute.validate.predict import ModelReplay, predict  # noqa: E402
from kvroute.validate.result import (  # noqa: E402
    EngineSetup,
    ResetOutcome,
    RunInfo,
    RunShape,
    Served,
    ValidateOptions,
    ValidationResult,
)
from kvroute.validate.run import validate  # noqa: E402
from kvroute.validate.serve import http_post  # noqa: E402
from kvroute.validate.settings import given_from_argv, with_given  # noqa: E402

BOUND_PP = {"vllm": 0.5, "llamacpp": 1.0}
OUTPUT_TOKENS = 8
MODEL = "SmolLM2-135M-Instruct"

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "in",
    "for",
    "on",
    "with",
    "by",
    "from",
    "at",
    "as",
    "is",
    "are",
    "was",
    "be",
    "this",
    "that",
    "it",
    "we",
    "you",
    "they",
    "order",
    "account",
    "invoice",
    "refund",
    "shipping",
    "delivery",
    "address",
    "payment",
    "card",
    "plan",
    "upgrade",
    "cancel",
    "renew",
    "password",
    "login",
    "error",
    "timeout",
    "request",
    "response",
    "server",
    "client",
    "cache",
    "memory",
    "latency",
    "model",
    "token",
    "prompt",
    "context",
    "window",
    "batch",
    "queue",
    "replica",
    "gateway",
    "route",
    "policy",
    "health",
    "metric",
    "please",
    "thanks",
    "could",
    "would",
    "should",
    "can",
    "will",
    "may",
    "must",
    "need",
    "want",
    "check",
    "update",
    "show",
    "list",
    "find",
    "customer",
    "support",
    "ticket",
    "issue",
    "problem",
    "status",
    "priority",
    "agent",
    "tool",
    "result",
    "summary",
    "report",
    "table",
    "data",
    "file",
    "record",
    "field",
    "value",
    "number",
    "date",
    "time",
    "week",
    "month",
    "year",
    "today",
    "quick",
    "small",
    "large",
    "fast",
    "slow",
    "new",
    "old",
    "first",
    "last",
    "next",
    "previous",
    "other",
    "same",
    "different",
    "every",
    "because",
    "however",
    "therefore",
    "also",
]
CODE = [
    "def",
    "class",
    "return",
    "if",
    "else",
    "elif",
    "for",
    "while",
    "import",
    "from",
    "self",
    "None",
    "True",
    "False",
    "try",
    "except",
    "raise",
    "with",
    "as",
    "lambda",
    "yield",
    "async",
    "await",
    "print",
    "len",
    "range",
    "dict",
    "list",
    "set",
    "tuple",
    "int",
    "str",
    "float",
    "bool",
    "value",
    "result",
    "items",
    "key",
    "data",
    "config",
    "path",
    "name",
    "index",
    "count",
    "total",
    "buffer",
    "offset",
    "size",
    "(",
    ")",
    ":",
    "=",
    "+",
    "-",
    "*",
    "[",
    "]",
    ",",
    ".",
    "==",
    "!=",
    "+=",
    "0",
    "1",
    "2",
]

Record = dict[str, Any]


def words(rng: np.random.Generator, n: int, vocab: list[str] = WORDS) -> str:
    picked = [vocab[i] for i in rng.integers(0, len(vocab), size=n)]
    return " ".join(picked).capitalize() + "."


def record(body: Record) -> Record:
    return {
        "request": {"model": MODEL, **body},
        "response": {"usage": {"completion_tokens": OUTPUT_TOKENS}},
    }


def system_prompt(rng: np.random.Generator) -> Iterator[Record]:
    system = "You are the support assistant of Acme Cloud. " + words(rng, 260)
    for _ in range(60):
        question = words(rng, int(rng.integers(8, 40)))
        yield record(
            {
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": question},
                ]
            }
        )


def multi_turn(rng: np.random.Generator) -> Iterator[Record]:
    system = "You are a helpful assistant. Keep answers short."
    sessions = [[{"role": "system", "content": system}] for _ in range(10)]
    order = [s for s in range(10) for _ in range(6)]
    rng.shuffle(order)
    for s in order:
        history = sessions[s]
        history.append({"role": "user", "content": words(rng, int(rng.integers(15, 45)))})
        yield record({"messages": [dict(m) for m in history]})
        history.append({"role": "assistant", "content": words(rng, int(rng.integers(15, 40)))})


def agent_loop(rng: np.random.Generator) -> Iterator[Record]:
    # The schema is in the system prompt: SmolLM2's chat template ignores a `tools` field
    # (llama.cpp and vLLM then send the model no tools at all), as many agent frameworks
    # do for models without native tool calling.
    tools = [
        {
            "name": name,
            "description": words(rng, 16),
            "parameters": {
                f"arg_{j}": {"type": "string", "description": words(rng, 6)} for j in range(3)
            },
        }
        for name in ("lookup_order", "issue_refund", "update_address", "search_kb", "escalate")
    ]
    system = (
        "You are an agent. Call one tool per step as `Action: name(args)`; you will get an "
        "`Observation:` back. Tools:\n" + json.dumps(tools, indent=1)
    )
    agents = [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": "Task: " + words(rng, 20)},
        ]
        for _ in range(8)
    ]
    for _step in range(7):
        for history in agents:
            yield record({"messages": [dict(m) for m in history]})
            name = tools[int(rng.integers(0, len(tools)))]["name"]
            history.append(
                {"role": "assistant", "content": f"Action: {name}(arg_0={words(rng, 3)!r})"}
            )
            history.append(
                {"role": "user", "content": "Observation: " + words(rng, int(rng.integers(10, 30)))}
            )


def many_prefixes(rng: np.random.Generator) -> Iterator[Record]:
    systems = [f"You are assistant number {k}. " + words(rng, 220) for k in range(6)]
    order = []
    for _ in range(10):
        rnd = list(range(6))
        rng.shuffle(rnd)
        order += rnd
    for k in order:
        question = words(rng, int(rng.integers(8, 30)))
        yield record(
            {
                "messages": [
                    {"role": "system", "content": systems[k]},
                    {"role": "user", "content": question},
                ]
            }
        )


def code_completion(rng: np.random.Generator) -> Iterator[Record]:
    """50 completions of code up to a cursor: 40 files seen once, 10 revisited with the
    cursor further on; 30 % of files open with the same ~80-token header."""
    header = (
        '"""Utilities for the billing service."""\n\nfrom __future__ import annotations\n\n'
        "import json\nimport logging\nimport os\nimport sys\nfrom dataclasses import dataclass\n"
        "from pathlib import Path\nfrom typing import Any\n\nlog = logging.getLogger(__name__)\n\n"
    )
    files = []
    for _ in range(40):
        body = words(rng, int(rng.integers(120, 260)), CODE).replace(" : ", ":\n    ")
        files.append((header if rng.random() < 0.3 else "") + body)
    order = [(f, 0.4 + 0.3 * float(rng.random())) for f in range(40)]
    for _ in range(10):
        order.insert(int(rng.integers(10, len(order))), (int(rng.integers(0, 10)), 0.9))
    for f, cut in order:
        text = files[f]
        yield record({"prompt": text[: int(len(text) * cut)]})


SHAPES: dict[str, Callable[[np.random.Generator], Iterator[Record]]] = {
    "system_prompt": system_prompt,
    "multi_turn": multi_turn,
    "agent_loop": agent_loop,
    "many_prefixes": many_prefixes,
    "code_completion": code_completion,
}


def write_shape(name: str, path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with path.open("wb") as f:
        for rec in SHAPES[name](rng):
            f.write(orjson.dumps(rec) + b"\n")


def load(path: Path, engine: str) -> tuple[list[Request], list[np.ndarray]]:
    """The trace as read, and its prompts tokenized with the engine's own tokenizer (the
    GGUF for llama.cpp; vLLM's Hugging Face directory, whose pre-tokenizer splits some
    digit runs differently)."""
    originals = list(read_trace(path, "openai", options=ReadOptions()))
    tokenizer = vllm_model_dir() if engine == "vllm" else None
    tokenized = list(tokenize_requests(originals, tokenizer, workers=1))
    ids = [r.prompt.token_ids for r in tokenized if isinstance(r.prompt, TokenPrompt)]
    assert len(ids) == len(originals)
    return originals, ids


async def run_one(
    engine: str,
    url: str,
    argv: tuple[str, ...],
    requests: list[Request],
    ids: list[np.ndarray],
    concurrency: int,
) -> tuple[ValidationResult, ModelReplay]:
    given = with_given(EngineSettings(), engine, given_from_argv(engine, argv))
    async with httpx.AsyncClient() as client:
        adapter = make_adapter(engine, url, client=client)
        return await validate(
            requests,
            ids,
            adapter,
            http_post(client, url, timeout_s=300.0),
            given,
            options=ValidateOptions(concurrency=concurrency),
        )


async def start(engine: str, state: StateDir) -> tuple[str, tuple[str, ...]]:
    options = LaunchOptions(parallel=4, ctx_tokens=2048, vllm_enforce_eager=True)
    async with httpx.AsyncClient() as client:
        records = await LocalEngines(state, client=client).up(
            engine, options=options, lifetime=Lifetime.TIED_TO_PARENT
        )
    return records[0].base_url, records[0].argv


async def stop(state: StateDir) -> None:
    async with httpx.AsyncClient() as client:
        await LocalEngines(state, client=client).down()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--engines", default="llamacpp,vllm")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--llamacpp-url")
    ap.add_argument("--vllm-url")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "kvroute-simulate-fidelity"
    )
    ap.add_argument(
        "--offline", action="store_true", help="Predict again from the runs saved in --out-dir."
    )
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    shapes = [s for s in args.shapes.split(",") if s]
    levels = [int(c) for c in args.concurrency.split(",") if c]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    traces = {}
    for name in shapes:
        path = args.out_dir / f"{name}.jsonl"
        if not args.offline:
            write_shape(name, path, args.seed + list(SHAPES).index(name))
        for engine in engines:
            traces[engine, name] = load(path, engine)
        requests, ids = traces[engines[0], name]
        print(f"{name}: {len(requests)} requests, {sum(len(x) for x in ids):,} prompt tokens")
    if args.offline:
        rows = offline(args.out_dir, engines, shapes, levels, traces)
    else:
        rows = serve_all(args, engines, shapes, levels, traces)
    summary = _summary(rows)
    (args.out_dir / "simulate_fidelity.json").write_bytes(
        orjson.dumps({"runs": rows, "summary": summary}, option=orjson.OPT_INDENT_2)
    )
    print()
    for engine, s in summary.items():
        verdict = "met" if s["mae_pp"] <= s["bound_pp"] else "MISSED"
        print(
            f"{engine}: overall hit-ratio MAE {s['mae_pp']:.3f} pp over {s['runs']} runs "
            f"(max {s['max_abs_pp']:.3f} pp; per-request MAE {s['request_mae_pp']:.2f} pp), "
            f"bound {s['bound_pp']} pp: {verdict}"
        )


def serve_all(
    args: argparse.Namespace,
    engines: list[str],
    shapes: list[str],
    levels: list[int],
    traces: dict[tuple[str, str], tuple[list[Request], list[np.ndarray]]],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kvroute-fidelity-") as tmp:
        state = StateDir(Path(tmp))
        for engine in engines:
            given_url = getattr(args, f"{engine}_url")
            t0 = time.perf_counter()
            # A given URL is assumed to run with kvroute's launcher settings (engines up).
            url, argv = (
                (given_url, _LAUNCHER_ARGV[engine])
                if given_url
                else asyncio.run(start(engine, state))
            )
            print(f"{engine} at {url} ({time.perf_counter() - t0:.0f} s to start)")
            try:
                for name in shapes:
                    requests, ids = traces[engine, name]
                    for c in levels:
                        r, pred = asyncio.run(run_one(engine, url, argv, requests, ids, c))
                        stem = args.out_dir / f"{engine}-{name}-c{c}"
                        _save(stem, r, pred)
                        rows.append(_row(engine, name, c, r))
                        print(_line(rows[-1]), flush=True)
            finally:
                if not given_url:
                    asyncio.run(stop(state))
    return rows


def _save(stem: Path, r: ValidationResult, pred: ModelReplay) -> None:
    opt = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    stem.with_suffix(".json").write_bytes(orjson.dumps(r, option=opt))
    run = {
        "setup": r.setup,
        "counters": [r.counter_prompt_tokens, r.counter_cached_tokens],
        "header": [r.engine, r.url, r.model, r.reset, r.run_shape, r.concurrency],
        "served": pred.served,
    }
    stem.with_suffix(".served.json").write_bytes(
        orjson.dumps(run, option=orjson.OPT_SERIALIZE_NUMPY)
    )


def offline(
    out_dir: Path,
    engines: list[str],
    shapes: list[str],
    levels: list[int],
    traces: dict[tuple[str, str], tuple[list[Request], list[np.ndarray]]],
) -> list[dict[str, Any]]:
    """Predict again from saved runs (after a model change), without engines."""
    rows = []
    for engine in engines:
        for name in shapes:
            for c in levels:
                path = out_dir / f"{engine}-{name}-c{c}.served.json"
                run = orjson.loads(path.read_bytes())
                s = run["setup"]
                fixed = {
                    "llamacpp": {"num_slots": s["reported"].get("num_slots")},
                    "vllm": {"block_size_tokens": s["reported"].get("block_size")},
                }
                given = {**s["given"], **fixed[engine]}
                setup = EngineSetup(
                    engine,
                    with_given(EngineSettings(), engine, given),
                    s["capacity_tokens"],
                    s["reported"],
                    s["given"],
                )
                served = [
                    Served(
                        **{
                            **x,
                            "output_token_ids": _arr(x["output_token_ids"]),
                            "prompt_token_ids": _arr(x["prompt_token_ids"]),
                        }
                    )
                    for x in run["served"]
                ]
                ids = traces[engine, name][1]
                pred = predict(ids, served, setup, lead_s=ValidateOptions().lead_s)
                counters = (
                    CacheCounters(*run["counters"]) if run["counters"][0] is not None else None
                )
                r = compare(
                    ids,
                    served,
                    pred,
                    setup=setup,
                    counters=counters,
                    endpoints=[_endpoint(q) for q in traces[engine, name][0]],
                    run=_run_info(run["header"]),
                )
                rows.append(_row(engine, name, c, r))
                print(_line(rows[-1]), flush=True)
    return rows


def _run_info(h: list[Any]) -> RunInfo:
    return RunInfo(h[0], h[1], h[2], ResetOutcome(h[3]), RunShape(h[4]), h[5])


def _arr(values: list[int] | None) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype=np.uint32)


def _endpoint(req: Request) -> str:
    return "completions" if isinstance(req.prompt, TextPrompt | TokenPrompt) else "chat"


_LAUNCHER_ARGV = {
    "llamacpp": ("--parallel", "4", "--cache-ram", "0"),
    "vllm": ("--max-num-seqs", "4"),
}


def _row(engine: str, shape: str, c: int, r: ValidationResult) -> dict[str, Any]:
    return {
        "engine": engine,
        "shape": shape,
        "concurrency": c,
        "requests": r.num_requests,
        "prompt_tokens": r.prompt_tokens,
        "predicted_hit": r.predicted_hit_ratio,
        "measured_hit": r.measured_hit_ratio,
        "counter_hit": r.counter_hit_ratio,
        "error_pp": r.hit_ratio_error_pp,
        "request_mae_pp": r.request_mae_pp,
        "exact_share": r.comparison.exact_share,
        "prompt_mismatches": r.num_prompt_mismatches,
        "serve_s": r.serve_s,
        "notes": r.notes,
    }


def _line(row: dict[str, Any]) -> str:
    counter = "n/a" if row["counter_hit"] is None else f"{100 * row['counter_hit']:.2f}%"
    return (
        f"  {row['engine']:8} {row['shape']:15} c={row['concurrency']} "
        f"predicted {100 * row['predicted_hit']:6.2f}%  measured {100 * row['measured_hit']:6.2f}% "
        f"(counters {counter})  error {row['error_pp']:+.3f} pp  per-request MAE "
        f"{row['request_mae_pp']:.2f} pp  exact {100 * row['exact_share']:.0f}%  "
        f"{row['serve_s']:.0f} s" + (f"  [{'; '.join(row['notes'])}]" if row["notes"] else "")
    )


def _summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        errs = [abs(r["error_pp"]) for r in mine]
        out[engine] = {
            "runs": len(mine),
            "mae_pp": float(np.mean(errs)),
            "max_abs_pp": float(np.max(errs)),
            "request_mae_pp": float(np.mean([r["request_mae_pp"] for r in mine])),
            "bound_pp": BOUND_PP[engine],
        }
    return out


if __name__ == "__main__":
    main()
