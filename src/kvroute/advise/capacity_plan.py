"""Capacity advice for the engine chosen for a class: is memory, not the engine, the lever? Pure.

From the same evidence as the decision, at other pools:

- the figure at the user's pool against the ideal (an infinite cache, prompts only);
- a sweep of pools (``SWEEP_FACTORS`` x the user's) and the smallest that reaches
  ``TARGET_SHARE`` of the ideal;
- fp8 KV where the device has it (the pool in fp8 bytes);
- ``n`` replicas, each with the user's pool, with requests sent round robin or by
  session (what ``cache_aware`` / ``session_affinity`` routing keeps together), ``n``
  the replicas the target pool needs (2 to ``MAX_REPLICAS``). They are *advised* (the
  deployment runs them) when capacity is the lever and session routing over them gains
  at least ``REPLICA_MIN_GAIN`` over one instance: replicas cost GPUs.

Capacity is the lever when the engine reaches less than ``LEVER_SHARE`` of the ideal at
the pool *and* a larger pool of the sweep gains more than the engines differ at the
pool (a working set read in turn shows a cliff, not a slope: the whole sweep counts).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from kvroute.advise.base import EngineFigures, LatencyEvidence
from kvroute.advise.hardware import Hardware
from kvroute.advise.result import CapacityPlan, Citation, Lever, Replicas, SweepPoint
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt

TARGET_SHARE = 0.9
LEVER_SHARE = 0.75
SWEEP_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
MAX_REPLICAS = 8
REPLICA_MIN_GAIN = 0.05
_AFFINITY_PREFIX_TOKENS = 64


def _pp(x: float) -> str:
    return f"{x * 100:+.1f} pp"


def affinity_key(request: Request) -> str:
    """What session routing keeps on one replica: the session, else the user, else the
    prompt's head (requests that share it land together, as cache-aware routing does)."""
    if request.session_id:
        return f"s:{request.session_id}"
    if request.user_id:
        return f"u:{request.user_id}"
    p = request.prompt
    if isinstance(p, BlockPrompt):
        return f"h:{int(p.block_hashes[0]) if p.block_hashes.size else 0}"
    if isinstance(p, TokenPrompt):
        return "t:" + p.token_ids[:_AFFINITY_PREFIX_TOKENS].tobytes().hex()
    return "none"


def _replicated(
    requests: Sequence[Request],
    assignment: Sequence[int],
    n: int,
    evidence: LatencyEvidence,
    engine: str,
    hardware: Hardware,
) -> float:
    benefit = 0.0
    weight = 0.0
    for replica in range(n):
        subset = [r for r, a in zip(requests, assignment, strict=True) if a == replica]
        if subset:
            f = evidence.figures(subset, engine, hardware)
            benefit += float(f.benefit.sum())
            weight += float(f.weight.sum())
    return benefit / weight if weight > 0 else 0.0


def replicas(
    requests: Sequence[Request],
    n: int,
    evidence: LatencyEvidence,
    engine: str,
    hardware: Hardware,
) -> Replicas:
    round_robin = [i % n for i in range(len(requests))]
    by_session = [zlib.crc32(affinity_key(r).encode()) % n for r in requests]
    return Replicas(
        num_replicas=n,
        cache_aware=_replicated(requests, by_session, n, evidence, engine, hardware),
        round_robin=_replicated(requests, round_robin, n, evidence, engine, hardware),
    )


def pool_for_target(sweep: Sequence[SweepPoint], target: float) -> int | None:
    return next((p.capacity_tokens for p in sweep if p.value >= target), None)


def plan_capacity(
    requests: Sequence[Request],
    evidence: LatencyEvidence,
    hardware: Hardware,
    at_pool: EngineFigures,
    ideal: float,
    engine_spread: float,
    where: str,
) -> CapacityPlan:
    """``at_pool``: the chosen engine's figures at the user's pool; ``engine_spread``:
    the largest minus the smallest feasible engine's figure there."""
    engine = at_pool.engine
    pool = hardware.pool_tokens
    sweep = []
    for factor in SWEEP_FACTORS:
        cap = max(1, int(pool * factor))
        value = (
            at_pool.value
            if factor == 1.0
            else evidence.figures(requests, engine, hardware, capacity_tokens=cap).value
        )
        sweep.append(SweepPoint(cap, value))
    share = at_pool.value / ideal if ideal > 0 else 1.0
    target = TARGET_SHARE * ideal
    needed = pool_for_target(sweep, target)
    fp8_pool = hardware.fp8_capacity.tokens if hardware.fp8_capacity is not None else None
    fp8_value = (
        evidence.figures(requests, engine, hardware, capacity_tokens=fp8_pool).value
        if fp8_pool is not None
        else None
    )
    n = MAX_REPLICAS if needed is None else math.ceil(needed / pool)
    reps = replicas(requests, int(np.clip(n, 2, MAX_REPLICAS)), evidence, engine, hardware)
    larger = [p for p in sweep if p.capacity_tokens > pool]
    best = max(larger, key=lambda p: p.value)
    gain = best.value - at_pool.value
    lever = Lever.CAPACITY if share < LEVER_SHARE and gain > engine_spread else Lever.NONE
    replica_gain = reps.cache_aware - at_pool.value
    advised = lever is Lever.CAPACITY and replica_gain >= REPLICA_MIN_GAIN
    reps = replace(reps, advised=advised)
    citations = [
        Citation(
            "capacity_share_of_ideal",
            f"{where}.capacity.share_of_ideal",
            f"{share:.1%}",
            f"< {LEVER_SHARE:.0%} of the ideal",
            "below" if share < LEVER_SHARE else "at or above",
        ),
        Citation(
            "capacity_gain_vs_engine_spread",
            f"{where}.capacity.sweep",
            f"+{gain * 100:.1f} pp at {best.capacity_tokens:,} tokens ({best.capacity_tokens / pool:g}x the pool)",
            f"> engines' spread {engine_spread * 100:.1f} pp",
            "capacity is the lever" if lever is Lever.CAPACITY else "capacity is not the lever",
        ),
        Citation(
            "replicas_advised",
            f"{where}.capacity.replicas",
            f"{reps.num_replicas} replicas by session: {_pp(replica_gain)} over one instance",
            f"capacity is the lever and >= {_pp(REPLICA_MIN_GAIN)}",
            f"run {reps.num_replicas} replicas" if advised else "one instance",
        ),
    ]
    return CapacityPlan(
        engine=engine,
        pool_tokens=pool,
        value_at_pool=at_pool.value,
        ideal=ideal,
        share_of_ideal=share,
        sweep=sweep,
        pool_for_target_tokens=needed,
        target_share=TARGET_SHARE,
        fp8_pool_tokens=fp8_pool,
        value_with_fp8=fp8_value,
        replicas=reps,
        lever=lever,
        citations=citations,
    )
