"""Offline replay of ``bench/gateway_cache_routing.py``'s schedules through a router.

The real benchmark takes minutes per front; this takes seconds, to compare routing
ideas before confirming them on real engines. Same schedules (``make_requests``), same
closed loop (8 users, a follow-up turn waits for its previous turn plus its think
time), the gateway's own routing path (:class:`~kvroute.gateway.cacheview.router.CacheRouter`
predictions, the policy, the chosen view pinned at dispatch and finished at the end),
and per replica a llama.cpp slot model (:mod:`kvroute.cache.models.llamacpp`, the engine's
flags) standing in for the engine: a request waits FIFO for a free slot, takes the slot
llama-server would pick, and reports that slot's hit.

Service time, a deliberately simple model of llama-server's loop (``update_slots``): each
replica computes one batch at a time, holding every running prompt's uncached tokens and
one token per generating slot (``--decode-ms`` per batch); a request that arrives while a
batch runs waits for it, and a prompt's first token comes out with its batch. An uncached
token costs ``--prefill-ms`` times ``1 + position / --attn-tokens`` (attention over the
context before it). The busy replicas share ``--cores``. Defaults fitted to the real
runs (``bench/route_replay_fidelity.py`` prints them side by side): 8 ms per token and
20 ms per decode step are near one llama-server thread on a quiet machine
(bench/RESULTS.md, "agreement": TTFT 538 ms for a 60-word prompt, 17 ms per token with
one slot); attention 1500 and 1.5 cores (the 2-core box is shared with the bench client
and other work) bring TTFT p50/p99 and run times within ~20 % (RMS of the log ratio) of
the issue-7 runs, where cores 2.0 and no attention term ran ~40 % fast (agent more so).

Fronts: ``rr`` (kvroute round_robin), ``ca`` (kvroute cache_aware, options from
``--ca key=value``, repeatable), ``sglr`` (an emulation of sglang-router's cache_aware:
an approximate prefix tree per worker, match ratio above 0.3 goes to the best match,
else to the worker with the smallest tree; shortest queue when imbalanced by more than
64 requests and 1.5x).

Run: ``.venv/bin/python bench/route_replay.py --seeds 0-11 --means-only``; with ``sglr``
and ``ca`` among the fronts it also counts the seeds where ``ca`` beats ``sglr`` by 5 pp of
hit and on TTFT p50 and p99.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import random
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from kvroute.cache.base import CacheGeometry
from kvroute.cache.models.llamacpp import LlamaCppConfig, LlamaCppPrefixCache
from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.cacheview.router import CacheRouter
from kvroute.gateway.cacheview.view import BackendCacheView
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, Policy
from kvroute.gateway.routing.policies.registry import policy_registry
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.tokenizer import load_tokenizer
from kvroute.types import TokenIds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_cache_routing import make_requests, quantile

CTX_PER_SLOT = 4096
_OUT_BASE = 0x4000_0000  # generated tokens: unique, never in a prompt


@dataclass(slots=True)
class _Replica:
    """One backend: what the router sees (name, view, outstanding) and the engine."""

    name: str
    view_: BackendCacheView
    engine: LlamaCppPrefixCache
    weight: float = 1.0
    num_outstanding: int = 0
    queue: list[int] = field(default_factory=list)
    running: dict[int, list[int]] = field(default_factory=dict)
    """request -> [prompt tokens left to prefill, tokens left to generate]."""
    step: list[int] = field(default_factory=list)
    """The requests in the batch being computed (empty: idle)."""
    step_left: float = 0.0
    """Seconds of one core the batch still needs."""

    def view(self) -> BackendCacheView:
        return self.view_


@dataclass(slots=True)
class _Req:
    index: int
    body: Mapping[str, Any]
    token_ids: TokenIds
    max_tokens: int
    depends_on: int | None
    think_s: float
    replica: int = -1
    sent_s: float = 0.0
    ttft_s: float | None = None
    end_s: float | None = None
    cached: int = 0
    queued: bool = False
    """Sent to a replica whose slots were all taken."""
    finish: Callable[[int], None] | None = None


class _SglrEmulation:
    """sglang-router's cache_aware, approximately (token trie per worker, no eviction)."""

    def __init__(self, num: int) -> None:
        self.tries: list[dict[int, Any]] = [{} for _ in range(num)]
        self.sizes = [0] * num

    def route(self, token_ids: TokenIds, loads: Sequence[int]) -> int:
        lo, hi = min(loads), max(loads)
        if hi - lo > 64 and hi > 1.5 * lo:
            choice = min(range(len(loads)), key=lambda i: loads[i])
        else:
            ids = token_ids.tolist()
            matches = [self._match(t, ids) for t in self.tries]
            best = max(range(len(matches)), key=lambda i: matches[i])
            if matches[best] / max(len(ids), 1) > 0.3:
                choice = best
            else:
                choice = min(range(len(self.sizes)), key=lambda i: self.sizes[i])
        self._insert(choice, token_ids.tolist())
        return choice

    @staticmethod
    def _match(trie: dict[int, Any], ids: list[int]) -> int:
        node, n = trie, 0
        for t in ids:
            nxt = node.get(t)
            if nxt is None:
                break
            node, n = nxt, n + 1
        return n

    def _insert(self, i: int, ids: list[int]) -> None:
        node = self.tries[i]
        for t in ids:
            nxt = node.get(t)
            if nxt is None:
                nxt = node[t] = {}
                self.sizes[i] += 1
            node = nxt


def replay(front: str, requests: Sequence[Any], args: argparse.Namespace) -> dict[str, Any]:
    prompts = PromptTokens(load_tokenizer())
    slots = args.slots
    engine_cfg = LlamaCppConfig(num_slots=slots, kv_unified=False, cache_ram_mib=0)
    view_cfg = CacheViewConfig(
        capacity_tokens=slots * CTX_PER_SLOT, slots=slots, kv_unified=False, cache_ram_mib=0
    )
    replicas = [
        _Replica(
            f"r{i}",
            BackendCacheView("llamacpp", view_cfg),
            LlamaCppPrefixCache(engine_cfg, CacheGeometry(slots * CTX_PER_SLOT)),
        )
        for i in range(args.replicas)
    ]
    router = CacheRouter(prompts, logging.getLogger("route_replay"))
    policy: Policy | None = None
    front, _, extra = front.partition(":")  # ca:key=value+key=value
    if front in ("rr", "ca"):
        name = "round_robin" if front == "rr" else "cache_aware"
        options = _options([*args.ca, *filter(None, extra.split("+"))])
        policy = policy_registry().get(name)(options if front == "ca" else {})
    sglr = _SglrEmulation(len(replicas)) if front == "sglr" else None
    reqs = [
        _Req(r.index, r.body, ids, r.max_tokens, r.depends_on, r.think_s)
        for r in requests
        if (ids := prompts.token_ids(r.body)) is not None
    ]
    rng = random.Random(args.seed)
    sequence = 0
    backends = cast("list[Backend]", replicas)

    def dispatch(req: _Req, now: float) -> None:
        nonlocal sequence
        req.sent_s = now
        if sglr is not None:
            choice = sglr.route(req.token_ids, [r.num_outstanding for r in replicas])
        else:
            assert policy is not None
            body = {**req.body, "max_tokens": req.max_tokens}
            prediction = router.predict(body, backends)
            assert prediction is not None
            pick = PickInput(rng=rng, sequence=sequence, prompt_tokens=req.token_ids.shape[0])
            sequence += 1
            snaps = [
                BackendSnapshot(
                    r.name,
                    r.weight,
                    r.num_outstanding,
                    h,
                    d.num_tokens,
                    d.idle_requests,
                    r.view_.num_slots,
                )
                for r, h, d in zip(replicas, prediction.hits, prediction.displaced, strict=True)
            ]
            choice = policy.order(snaps, pick)[0]
            if front == "ca":
                req.finish = router.start(prediction, backends, backends[choice], body).release
        req.replica = choice
        req.queued = replicas[choice].num_outstanding >= args.slots
        replicas[choice].num_outstanding += 1
        replicas[choice].queue.append(req.index)

    return _simulate(reqs, replicas, dispatch, args)


def _admit(rep: _Replica, reqs: list[_Req], args: argparse.Namespace) -> None:
    """Queued requests take free slots (FIFO); an idle replica starts its next step."""
    while rep.queue and len(rep.running) < args.slots:
        req = reqs[rep.queue.pop(0)]
        seq = rep.view_.seq(req.token_ids, chain_hashes(req.token_ids, 1))
        adm = rep.engine.pin(req.index, seq, seq.num_tokens + req.max_tokens)
        req.cached = adm.cached_tokens
        rep.running[req.index] = [seq.num_tokens - req.cached, req.max_tokens]
    if rep.running and not rep.step:
        # llama-server's update_slots: one batch with every prompt still to prefill
        # (whole: these prompts are under n_batch) and one token per generating slot.
        rep.step = list(rep.running)
        rep.step_left = (
            sum(_prefill_ms(reqs[i], w[0], args) for i, w in rep.running.items()) + args.decode_ms
        ) / 1000


def _prefill_ms(req: _Req, num_uncached: int, args: argparse.Namespace) -> float:
    """One core's time for a prompt's uncached tokens: ``--prefill-ms`` each, plus the
    attention over the context before each (``--attn-tokens``: the context length at
    which a token's attention costs as much as the rest of its forward pass)."""
    if num_uncached <= 0:
        return 0.0
    if args.attn_tokens <= 0:
        return num_uncached * args.prefill_ms
    end = int(req.token_ids.shape[0])
    mean_pos = end - (num_uncached + 1) / 2
    return num_uncached * args.prefill_ms * (1 + mean_pos / args.attn_tokens)


def _simulate(
    reqs: list[_Req],
    replicas: list[_Replica],
    dispatch: Callable[[_Req, float], None],
    args: argparse.Namespace,
) -> dict[str, Any]:
    now = 0.0
    pending = iter(range(len(reqs)))
    ready: list[tuple[float, int, int]] = []  # (time, tiebreak, request) to send
    waiting_on: dict[int, list[int]] = {}  # dependency -> requests whose user waits

    def next_for_user(free_at: float) -> None:
        i = next(pending, None)
        if i is None:
            return
        dep = reqs[i].depends_on
        if dep is not None and reqs[dep].end_s is None:
            waiting_on.setdefault(dep, []).append(i)
            return
        at = free_at if dep is None else max(free_at, (reqs[dep].end_s or 0.0) + reqs[i].think_s)
        heapq.heappush(ready, (at, i, i))

    for _ in range(args.concurrency):
        next_for_user(0.0)
    done = 0
    while done < len(reqs):
        busy = [r for r in replicas if r.step]
        speed = min(1.0, args.cores / len(busy)) if busy else 1.0
        t_next = ready[0][0] if ready else float("inf")
        t = min([t_next] + [now + r.step_left / speed for r in busy])
        for rep in busy:
            rep.step_left -= (t - now) * speed
            if rep.step_left > 1e-9:
                continue
            for rid in rep.step:
                work = rep.running[rid]
                if work[0] > 0:  # its prompt was in this batch: the first token comes out
                    work[0] = 0
                    reqs[rid].ttft_s = t - reqs[rid].sent_s
                work[1] -= 1
                if work[1] <= 0:
                    del rep.running[rid]
                    _end(reqs[rid], rep, t)
                    done += 1
                    next_for_user(t)
                    for j in waiting_on.pop(rid, []):
                        heapq.heappush(ready, (t + reqs[j].think_s, j, j))
            rep.step = []
        now = t
        while ready and ready[0][0] <= now:
            _, _, i = heapq.heappop(ready)
            dispatch(reqs[i], now)
        for rep in replicas:
            _admit(rep, reqs, args)
    return _summary(reqs, replicas)


def _end(req: _Req, rep: _Replica, now: float) -> None:
    req.end_s = now
    rep.num_outstanding -= 1
    outputs = np.arange(req.max_tokens - 1, dtype=np.uint32) + _OUT_BASE + req.index * 4096
    final = np.concatenate((req.token_ids, outputs))
    rep.engine.unpin(req.index, rep.view_.seq(final, chain_hashes(final, 1)))
    if req.finish is not None:
        req.finish(req.max_tokens)


def _summary(reqs: Sequence[_Req], replicas: Sequence[_Replica]) -> dict[str, Any]:
    prompt = sum(int(r.token_ids.shape[0]) for r in reqs)
    cached = sum(r.cached for r in reqs)
    ttfts = sorted(r.ttft_s for r in reqs if r.ttft_s is not None)
    per = [sum(r.replica == i for r in reqs) for i in range(len(replicas))]
    # a follow-up turn that found less than half of its previous turn's prompt cached
    lost = sum(
        r.depends_on is not None and 2 * r.cached < reqs[r.depends_on].token_ids.shape[0]
        for r in reqs
    )
    return {
        "hit_pct": round(100 * cached / prompt, 1),
        "ttft_p50_s": round(statistics.median(ttfts), 2),
        "ttft_p99_s": round(quantile(ttfts, 0.99), 2),
        "max_over_mean": round(max(per) / statistics.fmean(per), 2),
        "requests_per_replica": per,
        "makespan_s": round(max(r.end_s or 0.0 for r in reqs), 1),
        "lost": lost,
        "queued": sum(r.queued for r in reqs),
    }


def _options(pairs: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = float(value) if "." in value else int(value)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="multiturn-own,multiturn,agent")
    ap.add_argument("--fronts", default="rr,sglr,ca")
    ap.add_argument("--ca", action="append", default=[], help="cache_aware option key=value")
    ap.add_argument("--num-requests", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--cores", type=float, default=1.5, help="CPU the replicas share")
    ap.add_argument("--prefill-ms", type=float, default=8.0, help="per uncached token")
    ap.add_argument("--decode-ms", type=float, default=20.0, help="per batch that generates")
    ap.add_argument(
        "--attn-tokens",
        type=float,
        default=1500.0,
        help="context at which a token's prefill costs double (0: no attention term)",
    )
    ap.add_argument("--seeds", default="0", help="schedule seeds: 0,1,2 or 0-11")
    ap.add_argument("--means-only", action="store_true", help="only the mean over seeds")
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return ap


def main() -> None:
    args = parser().parse_args()
    seeds = _seeds(args.seeds)
    print(
        f"{'workload':<14} {'front':<24} {'seed':>4} {'hit %':>6} {'p50 s':>6} {'p99 s':>6} "
        f"{'max/mean':>8} {'makespan':>8} {'lost':>4} {'queued':>6}"
    )
    keys = ("hit_pct", "ttft_p50_s", "ttft_p99_s", "max_over_mean", "makespan_s", "lost", "queued")
    for workload in args.workloads.split(","):
        schedules = [make_requests(workload, args.num_requests, args.max_tokens, x) for x in seeds]
        by_front: dict[str, list[dict[str, Any]]] = {}
        for front in args.fronts.split(","):
            rows = by_front[front] = []
            for seed, requests in zip(seeds, schedules, strict=True):
                rows.append(replay(front, requests, args))
                if not args.means_only:
                    _row(workload, front, str(seed), rows[-1], keys)
            if len(seeds) > 1:
                mean = {k: round(statistics.fmean(r[k] for r in rows), 2) for k in keys}
                _row(workload, front, "mean", mean, keys)
        if "sglr" in by_front and "ca" in by_front:
            pairs = list(zip(by_front["ca"], by_front["sglr"], strict=True))
            hit = sum(c["hit_pct"] >= g["hit_pct"] + 5 for c, g in pairs)
            p50 = sum(c["ttft_p50_s"] <= g["ttft_p50_s"] for c, g in pairs)
            p99 = sum(c["ttft_p99_s"] <= g["ttft_p99_s"] for c, g in pairs)
            print(
                f"{workload:<14} ca vs sglr, seeds where ca has hit >= +5 pp: {hit}/{len(pairs)}, "
                f"TTFT p50 <=: {p50}/{len(pairs)}, p99 <=: {p99}/{len(pairs)}"
            )


def _row(workload: str, front: str, seed: str, s: dict[str, Any], keys: Sequence[str]) -> None:
    cells = " ".join(f"{s[k]:>{w}}" for k, w in zip(keys, (6, 6, 6, 8, 8, 4, 6), strict=True))
    print(f"{workload:<14} {front:<24} {seed:>4} {cells}", flush=True)


def _seeds(spec: str) -> list[int]:
    """``0,3,5`` or ``0-11``."""
    if "-" in spec:
        lo, _, hi = spec.partition("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in spec.split(",")]


if __name__ == "__main__":
    main()
