"""The verdict in the terms teams choose engines by, stated with the numbers behind it.

Thresholds (on the ideal prefix-overlap rate): below 40 % vLLM and SGLang cache about
equally, so vLLM's general-purpose scheduler is the default; 40-60 % is a grey zone to
settle with ``kvroute simulate`` and ``bench``; above 60 % SGLang's radix cache pays
off. Concurrency above ~16 users exhausts llama.cpp's slots.
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
from kvroute.analyze.sessions import SessionsResult
from kvroute.analyze.shape import ShapeResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def verdict_for(
    overlap: Overlap, groups: Groups, sessions: SessionsResult, shape: ShapeResult
) -> Verdict:
    label, hit = overlap.figures()[0]  # the trace's own figure
    measured = (
        f"measured prefix overlap {_pct(hit)} of {overlap.prompt_tokens:,} prompt tokens ({label})"
    )
    if hit < EQUIVALENT_BELOW:
        level = VerdictLevel.EQUIVALENT
        headline = (
            f"Engines equivalent on caching: {measured} is below {_pct(EQUIVALENT_BELOW)}; "
            "vLLM is the sensible default."
        )
    elif hit <= RADIX_ABOVE:
        level = VerdictLevel.GREY_ZONE
        headline = (
            f"Grey zone: {measured} is between {_pct(EQUIVALENT_BELOW)} and {_pct(RADIX_ABOVE)}; "
            "run `kvroute simulate` at your KV capacity and `kvroute bench` before choosing."
        )
    else:
        level = VerdictLevel.RADIX_PAYS
        headline = (
            f"Radix caching pays off: {measured} is above {_pct(RADIX_ABOVE)}; "
            "SGLang's token-level radix cache (or prefix-aware routing) should save real prefill."
        )
    reasons: list[str] = []
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
