"""What ``kvroute advise`` decided and why: plain dataclasses, written as ``advice.json``.

``SCHEMA`` names the layout; docs/advise.md documents every field. Every decision
carries :class:`Citation` s: the input field it read, the rule, the threshold, the value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

SCHEMA = "kvroute.advise/1"


@dataclass(frozen=True, slots=True)
class Citation:
    rule: str
    field: str
    """Where the value is in advice.json (``classes[agent].overlap``) or which option."""
    value: str
    threshold: str
    outcome: str


class Move(enum.Enum):
    STAY = "stay"
    """Keep the incumbent."""
    SWITCH = "switch"
    """Replace the incumbent with an engine the fleet already runs or will run."""
    ADD = "add"
    """Bring an engine into the fleet for this class."""


class Lever(enum.Enum):
    ENGINE = "engine"
    CAPACITY = "capacity"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Feasibility:
    engine: str
    feasible: bool
    conditions: list[str]
    """What must hold for the engine to run here (ports on loopback, one instance per tenant)."""
    citations: list[Citation]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """What ``kvroute predict`` gave for one engine on one class (seconds; ``None`` where
    no request has the metric, e.g. TPOT of one-token outputs)."""

    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    attainment: dict[str, float]
    """Per ``--slo`` target: the share of requests within its limit."""
    saturated: bool
    verdict: str
    load: str
    calibration_source: str
    uses_prior: bool
    """True when no calibration for this engine and GPU was given or shipped: the step
    times are another engine's or GPU's fit, widened."""


@dataclass(frozen=True, slots=True)
class EngineScore:
    engine: str
    value: float
    low: float
    high: float
    vs_incumbent: float | None
    vs_incumbent_low: float | None
    vs_incumbent_high: float | None
    margin: float | None
    """What ``vs_incumbent_low`` had to exceed; None for the incumbent itself."""
    clears_margin: bool
    details: dict[str, float]
    latency: LatencySummary | None = None
    """Predicted latencies behind an ``slo_attainment`` score; None for hit evidence."""


@dataclass(frozen=True, slots=True)
class Prior:
    """The 40/60 % rule of thumb on this class's overlap, and whether the evidence agrees."""

    overlap: float
    band: str
    engine: str | None
    """What the band alone would pick; None in the grey zone."""
    borne_out: bool | None
    text: str


@dataclass(frozen=True, slots=True)
class SweepPoint:
    capacity_tokens: int
    value: float


@dataclass(frozen=True, slots=True)
class Replicas:
    num_replicas: int
    cache_aware: float
    """The figure with requests routed by session (cache-aware/affinity)."""
    round_robin: float
    advised: bool = False
    """True when the deployment runs ``num_replicas`` of the engine for this class (the
    capacity lever, and cache-aware routing over them gains ``REPLICA_MIN_GAIN`` over one)."""


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    engine: str
    pool_tokens: int
    value_at_pool: float
    ideal: float
    share_of_ideal: float
    sweep: list[SweepPoint]
    pool_for_target_tokens: int | None
    """Smallest swept pool reaching ``target_share`` of the ideal; None if none did."""
    target_share: float
    fp8_pool_tokens: int | None
    value_with_fp8: float | None
    replicas: Replicas | None
    lever: Lever
    citations: list[Citation]


@dataclass(frozen=True, slots=True)
class ClassDecision:
    workload: str
    """A gateway workload class, or ``all`` when one engine serves the whole trace."""
    num_requests: int
    share_of_requests: float
    overlap: float
    """Ideal (infinite cache) prefix overlap of the class's own prompts."""
    concurrency_p90: float
    num_tenants: int
    isolated_overlap: float | None
    """Overlap when tenants share no cache (``--exposure multi-tenant``)."""
    incumbent: str
    engine: str
    move: Move
    lever: Lever
    headline: str
    feasibility: list[Feasibility]
    scores: list[EngineScore]
    prior: Prior
    capacity: CapacityPlan | None
    requests_to_decide: int | None
    """When the interval straddles the margin: about how many requests would settle it."""
    citations: list[Citation]


@dataclass(frozen=True, slots=True)
class Flag:
    flag: str
    value: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class EngineFlags:
    engine: str
    version: str
    flags: list[Flag]
    replicas: int = 1
    """Instances of the engine, each with these flags, behind one gateway pool."""
    replicas_reason: str = "one instance: no class it serves was advised replicas"


@dataclass(frozen=True, slots=True)
class TraceFacts:
    path: str
    format: str
    num_requests: int
    prompt_tokens: int
    overlap: float
    prompt_form: str


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    model: str
    gpu: str
    device_kind: str
    num_gpus: int
    kv_bytes_per_token: int | None
    pool_tokens: int
    fp8_pool_tokens: int | None
    weight_bytes: int | None


@dataclass(frozen=True, slots=True)
class Inputs:
    team_size: int
    ops: str
    exposure: str
    slo: dict[str, float]
    engines: list[str]
    evidence: str
    """The metric the scores are in: ``prefill_saved`` (hits) or ``slo_attainment``."""
    current: str | None
    evidence_fallback: str | None = None
    """Why latency evidence was asked for (``--slo``) but hits were scored instead."""


@dataclass(frozen=True, slots=True)
class Change:
    """One class against what runs today (``--current``)."""

    workload: str
    current: str | None
    advised: str
    move: str


@dataclass(frozen=True, slots=True)
class Advice:
    schema: str
    headline: str
    scope: str
    """``per_class`` (a gateway routes each class) or ``single_engine`` (a team under 3)."""
    trace: TraceFacts
    hardware: HardwareFacts
    inputs: Inputs
    engines: list[str]
    """The engines the fleet runs after the advice."""
    classes: list[ClassDecision]
    flags: list[EngineFlags]
    citations: list[Citation]
    changes: list[Change] = field(default_factory=list)
    """Against ``--current``: per class, today's engine and the advised one."""
    notes: list[str] = field(default_factory=list)
