"""The result of ``kvroute simulate``: plain dataclasses, serialised as versioned JSON.

``SCHEMA`` names the JSON layout; docs/simulate-json.md documents every field. Bump it on
any incompatible change.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.cache.capacity import Capacity
from kvroute.cache.compare import CachedTokensComparison
from kvroute.cache.saturation import Saturation
from kvroute.stats import Distribution
from kvroute.types import JSONValue

SCHEMA = "kvroute.simulate/1"


@dataclass(frozen=True, slots=True)
class TraceSummary:
    path: str
    format: str
    num_requests: int
    num_skipped: int
    prompt_form: str
    """``tokens`` or ``block_hashes``."""
    tokenizer: str | None
    block_size_tokens: int | None
    """The trace's block size for hash-only traces, ``None`` for token traces."""
    prompt_tokens: int
    num_outputs_known: int
    tokenizer_warning: str | None = None
    """Set when the requests name models the tokenizer does not plausibly belong to."""


@dataclass(frozen=True, slots=True)
class ReplaySetup:
    arrivals: str
    """``trace``, ``poisson`` or ``sequential``."""
    use_trace_end_times: bool
    num_trace_run_times: int
    """Requests whose run time came from the trace (the rest use the service model)."""
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    arrival_rate_per_s: float | None
    default_output_tokens: int
    num_outputs_drawn: int
    cache_outputs: bool
    seed: int


@dataclass(frozen=True, slots=True)
class Ideal:
    """What an infinite, never-evicting cache would serve (``kvroute analyze``)."""

    granularity: str
    """``token`` (exact LCP) or ``block`` (hash-only traces)."""
    hit_ratio: float
    reusable_tokens: int
    block_size_tokens: int
    block_hit_ratio: float
    block_reusable_tokens: int


@dataclass(frozen=True, slots=True)
class EngineRun:
    """One engine model replayed at one capacity."""

    engine: str
    settings: dict[str, JSONValue]
    capacity_tokens: int | None
    unit_tokens: int
    num_requests: int
    num_admitted: int
    num_rejected: int
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    """Prompt tokens prefilled by admitted requests (prompt - cached)."""
    hit_ratio: float
    """cached_tokens / prompt_tokens over all requests (rejected ones count as misses)."""
    share_requests_with_hit: float
    per_request_hit: Distribution
    evicted_tokens: int
    num_evictions: int
    peak_pinned_tokens: int
    peak_pinned_bytes: int | None
    peak_running: int
    wait_s: Distribution
    saturation: Saturation | None
    """Whether it kept up with the arrivals (None: sequential replay or too few requests)."""
    counters: dict[str, int]
    vs_reported: CachedTokensComparison | None
    """Against the engine-reported cached tokens of the trace, when it has them."""
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class Curve:
    """Hit ratio of one engine against KV capacity."""

    engine: str
    capacity_tokens: list[int]
    hit_ratio: list[float]
    evicted_tokens: list[int]
    num_rejected: list[int]


@dataclass(frozen=True, slots=True)
class SimulationResult:
    schema: str
    trace: TraceSummary
    capacity: Capacity
    replay: ReplaySetup
    ideal: Ideal | None
    engines: list[EngineRun]
    sweep: list[Curve]
    notes: list[str]
    elapsed_s: float
