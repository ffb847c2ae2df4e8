"""One request's reuse, explained: from which earlier request, which segments of its
prompt, and what each engine would have kept.

The ideal figure is the request's longest common prefix with any earlier prompt (as
:mod:`kvroute.analyze.run` counts it). Segments are the prompt's messages as the chat
template renders them; a segment's reused part is its overlap with that prefix, and its
*source* is the first earlier request that already held that part (the one that
prefilled it). Engine figures come from replays passed in by the caller. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.analyze.prefix_index import lcp_len

Units = npt.NDArray[np.uint32] | npt.NDArray[np.uint64]
"""A prompt's token ids, or its block hashes repeated once per token (hash-only traces)."""


@dataclass(frozen=True, slots=True)
class SegmentReuse:
    field: str
    """``messages[i] (role)`` or ``generation prompt``."""
    start_tokens: int
    end_tokens: int
    reused_tokens: int
    source_request: int | None
    """First earlier request (0-based, trace order) holding this segment's reused part."""
    preview: str | None


@dataclass(frozen=True, slots=True)
class EngineKept:
    engine: str
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class Explanation:
    request: int
    """0-based index in trace order."""
    source_line: int | None
    session_id: str | None
    prompt_tokens: int
    reused_tokens: int
    """Longest common prefix with any earlier request: what an infinite cache reuses."""
    best_match: int | None
    """The most recent earlier request sharing ``reused_tokens`` (``None``: none shares any)."""
    best_match_same_conversation: bool
    first_holder: int | None
    """The first request that held the whole reused prefix."""
    segments: list[SegmentReuse]
    capacity_tokens: int | None
    engines: list[EngineKept]


def explain_request(
    token_ids: Sequence[Units],
    index: int,
    *,
    sessions: Sequence[str | None],
    source_line: int | None = None,
    segments: Sequence[tuple[str, int, str | None]] = (),
    capacity_tokens: int | None = None,
    engines: Sequence[EngineKept] = (),
) -> Explanation:
    """Explain request ``index`` of ``token_ids`` (trace order; only requests up to it
    are read). ``segments`` are (field, end token, preview) in prompt order, each
    starting where the previous one ends."""
    me = token_ids[index]
    lcps = [lcp_len(token_ids[j], me) for j in range(index)]
    reused = max(lcps, default=0)
    best = max((j for j, v in enumerate(lcps) if v == reused), default=None) if reused else None
    first = next((j for j, v in enumerate(lcps) if v >= reused), None) if reused else None
    out: list[SegmentReuse] = []
    start = 0
    for field, given_end, preview in segments:
        end = max(start, min(given_end, int(me.shape[0])))
        covered = max(0, min(end, reused) - start)
        source = next((j for j, v in enumerate(lcps) if v >= start + covered), None)
        out.append(SegmentReuse(field, start, end, covered, source if covered else None, preview))
        start = end
    session = sessions[index]
    return Explanation(
        request=index,
        source_line=source_line,
        session_id=session,
        prompt_tokens=int(me.shape[0]),
        reused_tokens=reused,
        best_match=best,
        best_match_same_conversation=best is not None
        and session is not None
        and sessions[best] == session,
        first_holder=first,
        segments=out,
        capacity_tokens=capacity_tokens,
        engines=list(engines),
    )
