"""Reuse broken down: per model, per user, per workload class, and within a
conversation versus across requests.

Every figure is the ideal overlap of :mod:`kvroute.analyze.run` (each request's LCP with
any earlier request) summed over a group's requests instead of the whole trace, so the
groups' reusable tokens add up to the headline's. *Within a conversation* is the part of
a request's LCP that its own session's previous turn (prompt and answer) already holds:
what a cache kept per conversation, or session-affinity routing, catches. *Across
requests* is the rest: reuse only other conversations provide (a shared system prompt, a
document), which needs a cache shared between them. Pure: columns in, dataclasses out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_GROUPS = 10
"""Groups listed per dimension (by prompt tokens); the rest are summed as one row."""
NONE_KEY = "(none)"


@dataclass(frozen=True, slots=True)
class GroupReuse:
    key: str
    """The model, user or class; ``(none)`` for requests without one, ``(N others)``
    for the groups past ``MAX_GROUPS``."""
    num_requests: int
    prompt_tokens: int
    reusable_tokens: int
    hit_ratio: float
    within_conversation_tokens: int
    share_of_prompt_tokens: float
    """This group's prompt tokens ÷ all (after the warm-up)."""


@dataclass(frozen=True, slots=True)
class Breakdown:
    dimension: str
    """``model``, ``user`` or ``class`` (the gateway's workload classification)."""
    num_groups: int
    groups: list[GroupReuse]


@dataclass(frozen=True, slots=True)
class BreakdownResult:
    prompt_tokens: int
    within_conversation_tokens: int
    across_requests_tokens: int
    within_conversation_share: float
    """÷ prompt tokens: reuse a per-conversation cache would catch."""
    across_requests_share: float
    """÷ prompt tokens: reuse only a cache shared between conversations catches."""
    by: list[Breakdown]


def _group(
    dimension: str,
    keys: Sequence[str | None],
    prompt_len: Sequence[int],
    lcp: Sequence[int],
    within: Sequence[int],
    total: int,
) -> Breakdown:
    sums: dict[str, list[int]] = {}  # key -> [requests, prompt, reusable, within]
    for key, n, r, w in zip(keys, prompt_len, lcp, within, strict=True):
        s = sums.setdefault(key if key is not None else NONE_KEY, [0, 0, 0, 0])
        s[0] += 1
        s[1] += n
        s[2] += r
        s[3] += w
    ordered = sorted(sums.items(), key=lambda kv: (-kv[1][1], kv[0]))
    shown, rest = ordered[:MAX_GROUPS], ordered[MAX_GROUPS:]
    if rest:
        folded = [sum(s[i] for _, s in rest) for i in range(4)]
        shown.append((f"({len(rest)} others)", folded))
    return Breakdown(
        dimension=dimension,
        num_groups=len(sums),
        groups=[
            GroupReuse(
                key=key,
                num_requests=s[0],
                prompt_tokens=s[1],
                reusable_tokens=s[2],
                hit_ratio=s[2] / s[1] if s[1] else 0.0,
                within_conversation_tokens=s[3],
                share_of_prompt_tokens=s[1] / total if total else 0.0,
            )
            for key, s in shown
        ],
    )


def breakdown(
    prompt_len: Sequence[int],
    lcp: Sequence[int],
    within_conversation: Sequence[int],
    labels: Mapping[str, Sequence[str | None]],
    *,
    first_request: int = 0,
) -> BreakdownResult:
    """Group the requests from ``first_request`` on (the warm-up's end) by each label
    dimension; a dimension with no label on any request is left out. ``labels[d][i]``
    is request ``i``'s label (trace order, as the other columns)."""
    sl = slice(first_request, None)
    lens, lcps, within = list(prompt_len[sl]), list(lcp[sl]), list(within_conversation[sl])
    total = sum(lens)
    inside = sum(within)
    reused = sum(lcps)
    by = [
        _group(dim, list(keys[sl]), lens, lcps, within, total)
        for dim, keys in labels.items()
        if any(k is not None for k in keys[sl])
    ]
    return BreakdownResult(
        prompt_tokens=total,
        within_conversation_tokens=inside,
        across_requests_tokens=reused - inside,
        within_conversation_share=inside / total if total else 0.0,
        across_requests_share=(reused - inside) / total if total else 0.0,
        by=by,
    )
