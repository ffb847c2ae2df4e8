"""The result of ``kvroute analyze``: plain dataclasses, serialised as versioned JSON.

``SCHEMA`` names the JSON layout; docs/analyze-json.md documents every field. Bump it
on any incompatible change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kvroute.analyze.breakdown import BreakdownResult
from kvroute.analyze.breaker_cost import BreakersResult
from kvroute.analyze.drift import DriftResult
from kvroute.analyze.pairwise import PairwiseResult
from kvroute.analyze.reuse import ReuseResult
from kvroute.analyze.sessions import SessionsResult
from kvroute.analyze.shape import ShapeResult
from kvroute.stats import Distribution

SCHEMA = "kvroute.analyze/1"

EQUIVALENT_BELOW = 0.40
RADIX_ABOVE = 0.60
LLAMACPP_MAX_USERS = 16


class Granularity(enum.Enum):
    TOKEN = "token"
    BLOCK = "block"


class VerdictLevel(enum.Enum):
    EQUIVALENT = "equivalent"
    GREY_ZONE = "grey_zone"
    RADIX_PAYS = "radix_pays"


@dataclass(frozen=True, slots=True)
class TraceInfo:
    path: str
    format: str
    num_requests: int
    num_skipped: int
    prompt_form: str
    """"tokens" (text tokenized with ``tokenizer``) or "block_hashes" (hash-only trace)."""
    tokenizer: str | None
    block_size_tokens: int
    models: dict[str, int]
    tokenizer_warning: str | None = None
    """Set when ``models`` name models the tokenizer does not plausibly belong to."""


@dataclass(frozen=True, slots=True)
class Overlap:
    """Ideal (infinite-cache) prefix reuse: a prompt token counts as reusable when it
    belongs to a prefix some earlier request already had."""

    granularity: Granularity
    """TOKEN when prompts are known as tokens (exact LCP); BLOCK for hash-only traces,
    whose LCP is known in whole blocks, or as the whole prompt when it repeats an earlier
    one (its partial last block's hash matches)."""
    prompt_tokens: int
    reusable_tokens: int
    hit_ratio: float
    """reusable_tokens / prompt_tokens at the finest granularity available."""
    block_size_tokens: int
    block_reusable_tokens: int
    block_hit_ratio: float
    """Same, counting whole blocks only (vLLM-style paged reuse; the gateway's live
    overlap): never a partial last block."""
    common_prefix_tokens: int
    """Length of the prefix every prompt of the trace shares (the LCP of all prompts; 0
    for fewer than two requests): the chat template's head, a system prompt every
    request carries. Reused by every request, so it says nothing about which reuse."""
    share_requests_with_reuse: float
    """Requests whose LCP with an earlier request is longer than
    ``common_prefix_tokens``: they reuse more than every prompt shares anyway."""
    per_request_hit: Distribution
    """Per request: matched prefix / prompt length."""
    lcp_tokens: Distribution
    """Per request: longest common prefix with any earlier request, tokens."""
    lcp_share: Distribution
    reported_cached_tokens: int | None
    """Sum of engine-reported cached tokens, when the log carries them."""
    reported_hit_ratio: float | None
    warmup: str | None = None
    """What ``--warmup`` left out of the headline, in words (``None``: nothing).

    With a warm-up, ``prompt_tokens``, ``reusable_tokens``, ``hit_ratio``,
    ``block_reusable_tokens`` and ``block_hit_ratio`` count the requests after it only
    (measured against every earlier request, warm-up included); every other figure
    counts the whole trace."""
    num_warmup_requests: int = 0
    cold_hit_ratio: float | None = None
    """``hit_ratio`` over the whole trace, from an empty cache (with a warm-up only)."""
    cold_block_hit_ratio: float | None = None

    def figures(self) -> list[tuple[str, float]]:
        """The two overlap rates, labelled: the trace's own (``hit_ratio``: token level,
        or for a hash-only trace whole blocks plus the partial last block of a prompt
        that repeats an earlier one whole), then whole blocks (``block_hit_ratio``)."""
        own = "token level" if self.granularity is Granularity.TOKEN else "blocks + repeats"
        return [
            (own, self.hit_ratio),
            (f"{self.block_size_tokens}-token blocks", self.block_hit_ratio),
        ]


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    rank: int
    num_requests: int
    start_tokens: int
    """Where this shared segment starts in the prompt (0: a leading prefix)."""
    prefix_tokens: int
    """Where it ends: shared prefix length through this segment."""
    tokens_saved: int
    share_of_reuse: float
    share_of_prompt_tokens: float
    preview_head: str | None
    preview_tail: str | None
    sub_block: bool
    """The pseudo-group of reuse shorter than one block."""


@dataclass(frozen=True, slots=True)
class Groups:
    num_groups: int
    top: list[SharedPrefix]
    top_share_of_reuse: float


@dataclass(frozen=True, slots=True)
class Verdict:
    level: VerdictLevel
    headline: str
    reasons: list[str]


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    schema: str
    trace: TraceInfo
    overlap: Overlap
    groups: Groups
    pairwise: PairwiseResult
    sessions: SessionsResult
    shape: ShapeResult
    reuse: ReuseResult
    verdict: Verdict
    elapsed_s: float
    drift: DriftResult = field(default_factory=lambda: DriftResult(0, 0.0, 0, []))
    """Shared prefixes that changed version (drift.py)."""
    breakdown: BreakdownResult | None = None
    """Reuse per model, user and class, within a conversation vs across requests."""
    breakers: BreakersResult | None = None
    """Per-request content inside shared prefixes, with its cost (breaker_cost.py);
    ``None`` for hash-only and pre-tokenized traces, which carry no text."""
