"""The verdict in the terms teams choose engines by, stated with the numbers behind it.

Thresholds (on the ideal prefix-overlap rate): below 40 % vLLM and SGLang cache about
equally, so vLLM's general-purpose scheduler is the default; 40-60 % is a grey zone to
settle with ``kvroute simulate`` and ``bench``; above 60 % SGLang's radix cache pays
off. Concurrency above ~16 users exhausts llama.cpp's slots.

Given the user's KV pool (``--capacity-tokens``), the verdict is decided on what an ideal
LRU cache of that size serves (the reuse-distance curve at the pool), not on the
unlimited ideal: a workload whose reuse does not fit the pool gains nothing from a radix
cache until memory grows, and the verdict then says that memory is the lever.
"""

from __future__ import annotations

from kvroute.analyze.result import (
    EQUIVALENT_BELOW,
    LLAMACPP_MAX_USERS,
    RADIX_ABOVE,
    Granularity,
    Groups,
    Overlap,
    Verdict,
    VerdictLevel,
)
from kvroute.analyze.reuse import PoolHit, ReuseResult
from kvroute.analyze.sessions import SessionsResult
from kvroute.analyze.shape import ShapeResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _level(hit: float) -> VerdictLevel:
    if hit < EQUIVALENT_BELOW:
        return VerdictLevel.EQUIVALENT
    if hit <= RADIX_ABOVE:
        return VerdictLevel.GREY_ZONE
    return VerdictLevel.RADIX_PAYS


def verdict_for(
    overlap: Overlap,
    groups: Groups,
    sessions: SessionsResult,
    shape: ShapeResult,
    reuse: ReuseResult | None = None,
) -> Verdict:
    """The verdict on the trace's own overlap figure or, when ``reuse`` carries the
    user's pool and the pool holds less than the ideal reuses, on the hit at the pool."""
    label, hit = overlap.figures()[0]  # the trace's own figure
    measured = (
        f"measured prefix overlap {_pct(hit)} of {overlap.prompt_tokens:,} prompt tokens ({label})"
    )
    pool = reuse.pool if reuse is not None else None
    # Both figures from the reuse curve (whole trace, the curve's blocks): like with like.
    limited = (
        reuse is not None and pool is not None and pool.lru_hit_ratio < reuse.infinite_hit_ratio
    )
    unlimited_level = _level(hit)
    after = ""
    if reuse is not None and pool is not None and limited:
        hit = pool.lru_hit_ratio
        measured = (
            f"at your KV pool of {pool.capacity_tokens:,} tokens{_sized(pool)} an ideal LRU "
            "cache serves "
            f"{_pct(hit)} of prompt tokens"
        )
        after = f" ({_pct(reuse.infinite_hit_ratio)} with unlimited memory)"
    level = _level(hit)
    if level is VerdictLevel.EQUIVALENT:
        headline = (
            f"Engines equivalent on caching: {measured}, below {_pct(EQUIVALENT_BELOW)}{after}; "
            "vLLM is the sensible default."
        )
    elif level is VerdictLevel.GREY_ZONE:
        headline = (
            f"Grey zone: {measured}, between {_pct(EQUIVALENT_BELOW)} and {_pct(RADIX_ABOVE)}"
            f"{after}; run `kvroute simulate` at your KV capacity and `kvroute bench` before "
            "choosing."
        )
    else:
        headline = (
            f"Radix caching pays off: {measured}, above {_pct(RADIX_ABOVE)}{after}; "
            "SGLang's token-level radix cache (or prefix-aware routing) should save real prefill."
        )
    if limited and level is not unlimited_level:
        headline += " A larger KV pool would change this verdict."
    reasons: list[str] = []
    if pool is not None and reuse is not None:
        reasons.append(_pool_reason(pool, reuse))
    gap = overlap.hit_ratio - overlap.block_hit_ratio
    token_level = overlap.granularity is Granularity.TOKEN
    if token_level or gap > 0:
        why = "" if token_level else ": a repeated prompt's partial last block is no whole block"
        reasons.append(
            f"At {overlap.block_size_tokens}-token blocks (vLLM-style, as the gateway's live "
            f"overlap counts) the ideal hit is {_pct(overlap.block_hit_ratio)}, "
            f"{100 * gap:.1f} points below {label}{why}."
        )
    if groups.top:
        g = groups.top[0]
        reasons.append(
            f"The largest shared prefix ({g.prefix_tokens:,} tokens, reused by {g.num_requests:,} requests) "
            f"accounts for {_pct(g.share_of_reuse)} of all reuse; the top {len(groups.top)} for "
            f"{_pct(groups.top_share_of_reuse)}."
        )
    if sessions.num_followup_turns:
        cont = sessions.continuation_share.mean or 0.0
        reasons.append(
            f"{sessions.num_sessions:,} sessions, {sessions.num_followup_turns:,} follow-up turns; on average "
            f"{_pct(cont)} of a follow-up prompt is the previous turn (multi-turn reuse favours caches that "
            "keep finished requests)."
        )
    reasons.append(_reuse_reason(overlap))
    if shape.concurrency is not None and shape.concurrency.p90 > LLAMACPP_MAX_USERS:
        reasons.append(
            f"p90 concurrency is {shape.concurrency.p90:.0f} requests, above the ~{LLAMACPP_MAX_USERS} "
            "where llama.cpp's slots run out."
        )
    if overlap.reported_hit_ratio is not None:
        reasons.append(
            f"The serving engine reported {_pct(overlap.reported_hit_ratio)} cached prompt tokens "
            f"against an ideal {_pct(hit)}."
        )
    return Verdict(level, headline, reasons)


def _reuse_reason(overlap: Overlap) -> str:
    """How many requests reuse more than the prefix every prompt shares anyway."""
    share = _pct(overlap.share_requests_with_reuse)
    common = overlap.common_prefix_tokens
    if not common:
        return f"{share} of requests reuse a prefix of an earlier request."
    return (
        f"Every prompt starts with the same {common:,} tokens (chat template head, common "
        f"system prompt); {share} of requests reuse more than that of an earlier request."
    )


def _sized(pool: PoolHit) -> str:
    return "" if pool.sized_from is None else f" ({pool.sized_from})"


def _pool_reason(pool: PoolHit, reuse: ReuseResult) -> str:
    """What the pool holds against the ideal, the optimal policy's bound, and the
    capacity (on the curve's grid) where LRU comes within 90 % of the ideal."""
    cap = f"{pool.capacity_tokens:,}"
    ideal = reuse.infinite_hit_ratio
    if pool.lru_hit_ratio >= ideal:
        return f"Your {cap}-token KV pool{_sized(pool)} holds the whole reuse: an ideal LRU cache of that size reaches the ideal {_pct(ideal)}."
    text = (
        f"At {cap} tokens LRU eviction keeps {_pct(pool.lru_hit_ratio)}, FIFO "
        f"{_pct(pool.fifo_hit_ratio)} and the optimal policy (Belady) {_pct(pool.optimal_hit_ratio)}, "
        f"against {_pct(ideal)} with unlimited memory"
    )
    gap_policy = pool.optimal_hit_ratio - pool.lru_hit_ratio
    gap_memory = ideal - pool.optimal_hit_ratio
    text += (
        ": most of the gap is eviction policy, not memory."
        if gap_policy > gap_memory
        else ": most of the gap is memory; no eviction policy closes it at this size."
    )
    enough = next(
        (
            c
            for c, h in zip(reuse.capacity_tokens, reuse.hit_ratio, strict=True)
            if h >= 0.9 * reuse.infinite_hit_ratio
        ),
        None,
    )
    if enough is not None and enough > pool.capacity_tokens:
        text += f" LRU comes within 90 % of the ideal from about {enough:,} tokens."
    return text
