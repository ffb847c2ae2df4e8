"""What a cache_aware routing decision costs on the gateway's event loop.

One decision is what the gateway does per request on a ``cache_aware`` route before
it forwards: render the chat template and tokenize (through the piece memo), hash the
prompt (per token; each view takes its units' keys from those), ask each backend's
cache view for its hit, order the backends, and pin the request in the chosen view. The request's end (unpin with
its output) is timed separately.

Workload: ``--sessions`` conversations with a ~``--system-chars`` system prompt of
their own, each growing by one user message and one answer per turn, over
``--backends`` backends (llama.cpp slot model and vLLM block model alternating). A
session is *warm* from its second turn: its history's pieces are in the memo. Only
warm turns whose prompt is at least ``--min-tokens`` long are reported.

The decision's time inside the cache models (``match`` and ``pin`` of
:mod:`kvroute.cache`, timed by wrapping the views' ``predict`` and ``start`` that call
them) is reported apart (``cache_model_us``), with the rest (``rest_us``: template,
tokens, hashes, policy): the two halves belong to different modules.

Run: ``.venv/bin/python bench/gateway_route_cost.py``; writes
``bench/gateway_route_cost_results.json``. For a before/after comparison, run it
alternately against two source trees (``PYTHONPATH=<tree>/src``) and compare medians;
``--decisions`` writes each decision's prompt digest, predicted hits and chosen backend,
so the two trees' files can be compared (``cmp``): a speed change must not change them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from kvroute.gateway.backends.backend import (
    Backend,
    adapter_factory,
    build_backends,
    pooled_transport,
)
from kvroute.gateway.cacheview.router import CacheRouter
from kvroute.gateway.config.gateway import BackendConfig, BreakerConfig
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.gateway.routing.policies.base import PickInput
from kvroute.gateway.routing.policies.cache_aware import CacheAware
from kvroute.trace.tokenizer import load_tokenizer


def _backends(n: int) -> list[Backend]:
    configs = tuple(
        BackendConfig(
            name=f"b{i}",
            url=f"http://127.0.0.1:{9000 + i}",
            engine="llamacpp" if i % 2 == 0 else "vllm",
        )
        for i in range(n)
    )
    built, _ = build_backends(
        configs, BreakerConfig(), (), pooled_transport, adapter_factory(httpx.AsyncClient())
    )
    return built


class _ModelTimer:
    """Adds up the time in each backend's cache model ``match`` and ``pin``.

    Wraps each view's ``predict`` (one ``match``) and ``start`` (one ``pin``): the
    models themselves may be compiled (read-only methods), and a proxy in their place
    would fail the views' ``isinstance`` checks.
    """

    def __init__(self, backends: list[Backend]) -> None:
        self.total_s = 0.0
        for backend in backends:
            view = backend.view()
            for name in ("predict", "start"):
                setattr(view, name, self._timed(getattr(view, name)))

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args)
            finally:
                self.total_s += time.perf_counter() - t0

        return timed


def _words(rng: random.Random, num_chars: int) -> str:
    vocab = ["nail", "screw", "aisle", "hammer", "paint", "timber", "glue", "drill", "hinge"]
    out: list[str] = []
    length = 0
    while length < num_chars:
        out.append(rng.choice(vocab) + str(rng.randrange(100)))
        length += len(out[-1]) + 1
    return " ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--backends", type=int, default=4)
    parser.add_argument("--system-chars", type=int, default=9_000)
    parser.add_argument("--min-tokens", type=int, default=4000)
    parser.add_argument(
        "--out", default=str(Path(__file__).with_name("gateway_route_cost_results.json"))
    )
    parser.add_argument(
        "--fresh-bodies",
        action="store_true",
        help="decode each request body from JSON before its decision, as the gateway does "
        "(fresh strings: nothing hashed on an earlier turn is cached on them)",
    )
    parser.add_argument(
        "--decisions",
        help="also write every decision (prompt length and digest, predicted hits, chosen "
        "backend) here as JSON lines, to check that two trees route alike",
    )
    args = parser.parse_args()
    rng = random.Random(0)
    router = CacheRouter(PromptTokens(load_tokenizer()), logging.getLogger("bench"))
    policy = CacheAware()
    backends = _backends(args.backends)
    timer = _ModelTimer(backends)
    histories: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": f"Store {s}. " + _words(rng, args.system_chars)}]
        for s in range(args.sessions)
    ]
    decide_us: list[float] = []
    finish_us: list[float] = []
    model_us: list[float] = []
    lengths: list[int] = []
    decisions: list[dict[str, Any]] = []
    sequence = 0
    for turn in range(args.turns):
        for s, history in enumerate(histories):
            history.append({"role": "user", "content": _words(rng, 200)})
            body = {"model": "m", "messages": history, "max_tokens": 128}
            if args.fresh_bodies:
                body = json.loads(json.dumps(body))
            timer.total_s = 0.0
            t0 = time.perf_counter()
            prediction = router.predict(body, backends, session_key=f"s{s}")
            assert prediction is not None
            # As the gateway's order_backends: hits (and, where the tree predicts them,
            # displaced tokens) in the snapshots.
            displaced = getattr(prediction, "displaced", None)
            if displaced is None:
                snapshots = [b.snapshot(h) for b, h in zip(backends, prediction.hits, strict=True)]
            else:
                snapshots = [
                    b.snapshot(h, d)
                    for b, h, d in zip(backends, prediction.hits, displaced, strict=True)
                ]
            pick = PickInput(rng=rng, sequence=sequence, prompt_tokens=prediction.num_tokens)
            chosen = backends[policy.order(snapshots, pick)[0]]
            lease = router.start(prediction, backends, chosen, body)
            t1 = time.perf_counter()
            in_models_s = timer.total_s
            lease.release(100)
            t2 = time.perf_counter()
            sequence += 1
            decisions.append(
                {
                    "turn": turn,
                    "session": s,
                    "num_tokens": prediction.num_tokens,
                    "tokens_sha1": hashlib.sha1(prediction.token_ids.tobytes()).hexdigest(),
                    "hits": list(prediction.hits),
                    "chosen": chosen.name,
                }
            )
            if turn > 0 and prediction.num_tokens >= args.min_tokens:
                decide_us.append((t1 - t0) * 1e6)
                finish_us.append((t2 - t1) * 1e6)
                model_us.append(in_models_s * 1e6)
                lengths.append(prediction.num_tokens)
            history.append({"role": "assistant", "content": _words(rng, 300)})

    def pcts(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "p50": round(statistics.median(ordered), 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "max": round(ordered[-1], 1),
        }

    result = {
        "args": vars(args),
        "num_decisions": len(decide_us),
        "prompt_tokens": pcts([float(n) for n in lengths]),
        "decision_us": pcts(decide_us),
        "cache_model_us": pcts(model_us),
        "rest_us": pcts([d - m for d, m in zip(decide_us, model_us, strict=True)]),
        "finish_us": pcts(finish_us),
        "memo": {
            "piece_hits": router.prompts.num_piece_hits,
            "piece_misses": router.prompts.num_piece_misses,
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.decisions:
        Path(args.decisions).write_text("".join(json.dumps(d) + "\n" for d in decisions))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
