"""``kvroute advise`` as a library: tokenized requests and their classes in, :class:`Advice` out. Pure.

Per class (or the whole trace, for a team under :data:`ROUTE_PER_CLASS_TEAM`): analyze
measures the ideal overlap of the class's own prompts, the schedule gives its
concurrency, and :func:`kvroute.advise.decide.decide` does the rest. With
``--exposure multi-tenant`` each class is decided on its tenant-isolated prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.advise.base import LatencyEvidence
from kvroute.advise.current import changes
from kvroute.advise.decide import ENGINE_NAMES, ClassInput, DecisionContext, decide
from kvroute.advise.flags import TraceLimits, engine_flags
from kvroute.advise.hardware import Hardware
from kvroute.advise.hit_evidence import METRIC as HIT_METRIC
from kvroute.advise.hit_evidence import HitEvidence
from kvroute.advise.options import AdviseOptions, Exposure
from kvroute.advise.result import (
    SCHEMA,
    Advice,
    Citation,
    ClassDecision,
    HardwareFacts,
    Inputs,
    Lever,
    TraceFacts,
)
from kvroute.advise.rules import Advisory
from kvroute.advise.scoring import cluster_ids, switching_margin
from kvroute.advise.workload import (
    concurrency_p90,
    isolate_tenants,
    num_tenants,
    prompt_len,
    split_by_class,
)
from kvroute.analyze.run import analyze_requests
from kvroute.cache.replay.seq import final_tokens
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.errors import InputError
from kvroute.gateway.types import WorkloadClass
from kvroute.trace.records import Request

ROUTE_PER_CLASS_TEAM = 3
"""Teams of three or more route per class through the gateway; smaller ones run one engine."""
ALL = "all"


@dataclass(frozen=True, slots=True)
class TraceSourceInfo:
    path: str
    format: str
    tokenizer: str | None


def _overlap(requests: Sequence[Request], source: TraceSourceInfo) -> float:
    result = analyze_requests(
        requests,
        trace_path=source.path,
        trace_format=source.format,
        tokenizer_name=source.tokenizer,
    )
    return result.overlap.hit_ratio


def class_input(
    name: str,
    requests: list[Request],
    share: float,
    source: TraceSourceInfo,
    options: AdviseOptions,
    timing: TimingOptions,
) -> ClassInput:
    overlap = _overlap(requests, source)
    tenants = num_tenants(requests)
    isolated = None
    served = requests
    if options.exposure is Exposure.MULTI_TENANT and tenants > 1:
        served = isolate_tenants(requests)
        isolated = _overlap(served, source)
    return ClassInput(
        name=name,
        requests=served,
        share_of_requests=share,
        overlap=overlap if isolated is None else isolated,
        concurrency_p90=concurrency_p90(requests, timing),
        num_tenants=tenants,
        isolated_overlap=isolated,
        clusters=cluster_ids([r.session_id or r.user_id for r in requests]),
    )


def _limits(requests: Sequence[Request], timing: TimingOptions) -> TraceLimits:
    schedule = plan(requests, timing)
    lengths = [prompt_len(r) for r in requests]
    longest = max(
        (final_tokens(p, o) for p, o in zip(lengths, schedule.output_tokens, strict=True)),
        default=0,
    )
    return TraceLimits(longest, int(np.percentile(lengths, 90)) if lengths else 0)


def advise(
    requests: list[Request],
    labels: Sequence[WorkloadClass],
    source: TraceSourceInfo,
    hardware: Hardware,
    options: AdviseOptions,
    evidence: LatencyEvidence,
    advisories: list[Advisory],
    *,
    current: dict[str, str] | None = None,
    timing: TimingOptions | None = None,
    evidence_fallback: str | None = None,
) -> Advice:
    """Decide, per class, the engine, its flags and its capacity (see decide.py).

    ``evidence_fallback``: why latency evidence was asked for but ``evidence`` is hits.

    Raises :class:`InputError` when the trace is too small to decide on.
    """
    t = timing or TimingOptions()
    n = len(requests)
    if n < options.min_trace_requests:
        raise InputError(
            f"{n} requests are too few to decide on: advise needs at least "
            f"{options.min_trace_requests} (and {options.min_class_requests} per class it "
            "decides alone)",
            path=source.path,
            hint="capture more traffic (gateway capture:) or lower --min-requests",
        )
    per_class = options.team.size >= ROUTE_PER_CLASS_TEAM
    if per_class:
        inputs = [
            class_input(c.workload.value, c.requests, c.share_of_requests, source, options, t)
            for c in split_by_class(requests, labels)
        ]
    else:
        inputs = [class_input(ALL, requests, 1.0, source, options, t)]
    # The capacity plan compares with the ideal hit ratio: it always replays hits.
    capacity_evidence = None if evidence.metric == HIT_METRIC else HitEvidence()
    ctx = DecisionContext(
        hardware, options, evidence, advisories, dict(current or {}), capacity_evidence
    )
    decisions = decide(inputs, ctx)
    whole = _overlap(requests, source)
    citations = [
        Citation(
            "route_per_class",
            "--team-size",
            str(options.team.size),
            f">= {ROUTE_PER_CLASS_TEAM}: a gateway routes each class; fewer: one engine",
            "per class" if per_class else "one engine for all traffic",
        ),
        Citation(
            "switching_margin",
            "--team-size, --ops",
            f"{options.team.size}, {options.team.ops.value}",
            "TEAM_MARGIN x OPS_FACTOR (scoring.py); half for an engine already in the fleet",
            f"{switching_margin(options.team) * 100:.1f} pp",
        ),
    ]
    flags = engine_flags(decisions, hardware, _limits(requests, t))
    shape = hardware.capacity
    return Advice(
        schema=SCHEMA,
        headline=headline(decisions),
        scope="per_class" if per_class else "single_engine",
        trace=TraceFacts(
            path=source.path,
            format=source.format,
            num_requests=n,
            prompt_tokens=sum(prompt_len(r) for r in requests),
            overlap=whole,
            prompt_form="tokens" if source.tokenizer else "block_hashes",
        ),
        hardware=HardwareFacts(
            model=hardware.model.name,
            gpu=hardware.gpu,
            device_kind=hardware.kind.value,
            num_gpus=hardware.num_gpus,
            kv_bytes_per_token=shape.kv_bytes_per_token,
            pool_tokens=hardware.pool_tokens,
            fp8_pool_tokens=hardware.fp8_capacity.tokens if hardware.fp8_capacity else None,
            weight_bytes=shape.weight_bytes,
        ),
        inputs=Inputs(
            team_size=options.team.size,
            ops=options.team.ops.value,
            exposure=options.exposure.value,
            slo={s.name: s.limit_s for s in options.slo},
            engines=list(options.engines),
            evidence=evidence.metric,
            current=None if not current else ",".join(f"{k}={v}" for k, v in current.items()),
            evidence_fallback=evidence_fallback,
        ),
        engines=sorted({d.engine for d in decisions}),
        classes=decisions,
        flags=flags,
        citations=citations,
        changes=changes(decisions, current) if current else [],
        notes=_notes(options, evidence, decisions, evidence_fallback),
    )


def headline(decisions: Sequence[ClassDecision]) -> str:
    """Capacity first when it is the lever for most traffic, then the engines."""
    cap_share = sum(d.share_of_requests for d in decisions if d.lever is Lever.CAPACITY)
    by_engine: dict[str, list[str]] = {}
    for d in decisions:
        by_engine.setdefault(d.engine, []).append(d.workload)
    engines = "; ".join(
        f"{ENGINE_NAMES[e]} for {', '.join(names)}" for e, names in sorted(by_engine.items())
    )
    against = [d for d in decisions if d.prior.borne_out is False]
    prior = (
        " The 40/60 % bands' prior is not borne out for "
        + ", ".join(
            f"{d.workload} ({d.prior.overlap:.0%} overlap: {ENGINE_NAMES[d.prior.engine or 'vllm']})"
            for d in against
        )
        + "."
        if against
        else ""
    )
    if cap_share >= 0.5:
        names = ", ".join(d.workload for d in decisions if d.lever is Lever.CAPACITY)
        return (
            f"KV capacity, not the engine, is the lever for {cap_share:.0%} of requests "
            f"({names}): grow the pool or add replicas with cache-aware routing. "
            f"Engines: {engines}.{prior}"
        )
    return f"Run {engines}.{prior}"


def _notes(
    options: AdviseOptions,
    evidence: LatencyEvidence,
    decisions: Sequence[ClassDecision],
    fallback: str | None,
) -> list[str]:
    notes = []
    if evidence.metric == HIT_METRIC:
        notes.append(
            "scores are prefill saved (simulated prefix-cache hits at the pool), not latency"
        )
        if fallback is not None:
            notes.append(f"--slo is not scored: {fallback}; scored on cache hits instead")
        elif options.slo:
            notes.append("--slo is recorded but not scored: --evidence hits has no latency")
        return notes
    notes.append(
        "scores are SLO attainment: the share of requests whose predicted TTFT/TPOT/E2E "
        "meet every --slo limit (kvroute predict); capacity advice replays cache hits"
    )
    prior = sorted(
        {s.engine for d in decisions for s in d.scores if s.latency and s.latency.uses_prior}
    )
    if prior:
        notes.append(
            "uses_prior: no calibration for "
            + ", ".join(ENGINE_NAMES[e] for e in prior)
            + " on this GPU: predict's widened priors stand in (run kvroute calibrate, "
            "then --calibration)"
        )
    return notes
