"""The decision per class: feasibility, then scores against the incumbent, then capacity. Pure.

Order for one class (each step cites its rule in the result):

1. feasibility (rules.py): engines that may not serve the class are out;
2. the incumbent: what ``--current`` runs for the class, else vLLM (ties go to vLLM);
3. every other feasible engine against the incumbent on the same requests: it wins
   only when the lower bound of its advantage clears the switching margin
   (scoring.py); the best lower bound among winners is taken;
4. the 40/60 % prior on the class's overlap, checked against the outcome;
5. capacity advice for the chosen engine (capacity_plan.py); when capacity is the
   lever, the headline leads with it.

A class with fewer than ``min_class_requests`` requests keeps its incumbent: too few
to tell engines apart, and the result says how many would do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvroute.advise.base import EngineFigures, LatencyEvidence
from kvroute.advise.capacity_plan import plan_capacity
from kvroute.advise.hardware import Hardware
from kvroute.advise.latency_evidence import slo_headline, target_citations
from kvroute.advise.options import DEFAULT_ENGINE, ENGINES, AdviseOptions
from kvroute.advise.result import (
    CapacityPlan,
    Citation,
    ClassDecision,
    EngineScore,
    Feasibility,
    Lever,
    Move,
    Prior,
)
from kvroute.advise.rules import Advisory, ClassFacts, feasibility
from kvroute.advise.scoring import (
    Interval,
    difference,
    ratio_interval,
    requests_to_resolve,
    switching_margin,
)
from kvroute.analyze.result import EQUIVALENT_BELOW, RADIX_ABOVE
from kvroute.errors import UsageError
from kvroute.trace.records import Request

ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM", "sglang": "SGLang"}


@dataclass(frozen=True, slots=True)
class ClassInput:
    """One class, ready to decide: its tokenized requests (isolated per tenant where
    the exposure asks) and what analyze measured of them."""

    name: str
    requests: list[Request]
    share_of_requests: float
    overlap: float
    concurrency_p90: float
    num_tenants: int
    isolated_overlap: float | None
    clusters: list[int]


@dataclass(frozen=True, slots=True)
class DecisionContext:
    hardware: Hardware
    options: AdviseOptions
    evidence: LatencyEvidence
    advisories: list[Advisory]
    current: dict[str, str]
    """Class name -> the engine that serves it today (``--current``)."""
    capacity_evidence: LatencyEvidence | None = None
    """What the capacity plan replays (it compares with the ideal hit ratio, so it needs
    hit evidence); None: :attr:`evidence` itself."""


def _pp(x: float) -> str:
    return f"{x * 100:+.1f} pp"


def prior_for(overlap: float) -> tuple[str, str | None]:
    if overlap < EQUIVALENT_BELOW:
        return "equivalent", "vllm"
    if overlap > RADIX_ABOVE:
        return "radix_pays", "sglang"
    return "grey_zone", None


def _prior(overlap: float, chosen: str, scores: list[EngineScore]) -> Prior:
    band, engine = prior_for(overlap)
    sg = next((s for s in scores if s.engine == "sglang"), None)
    vl = next((s for s in scores if s.engine == "vllm"), None)
    gap = ""
    if sg is not None and vl is not None:
        d = sg.value - vl.value
        gap = f"; evidence: SGLang {_pp(d)} over vLLM"
    rule = f"overlap {overlap:.1%} (bands < {EQUIVALENT_BELOW:.0%} / > {RADIX_ABOVE:.0%})"
    if engine is None:
        return Prior(overlap, band, None, None, f"{rule}: grey zone, no prior{gap}")
    borne = engine == chosen
    verdict = "borne out" if borne else "not borne out"
    return Prior(
        overlap,
        band,
        engine,
        borne,
        f"{rule}: the band says {ENGINE_NAMES[engine]}; {verdict}{gap}",
    )


def _incumbent(name: str, feasible: list[str], current: dict[str, str]) -> str:
    now = current.get(name)
    if now in feasible:
        return now
    for engine in (DEFAULT_ENGINE, *ENGINES):
        if engine in feasible:
            return engine
    raise AssertionError("no feasible engine")  # the caller checks feasible is non-empty


def _scores(
    inp: ClassInput,
    figures: dict[str, EngineFigures],
    incumbent: str,
    ctx: DecisionContext,
    fleet: set[str],
) -> list[EngineScore]:
    out = []
    base = figures[incumbent]
    for engine, f in figures.items():
        iv = ratio_interval(f.benefit, f.weight, inp.clusters)
        if engine == incumbent:
            out.append(
                EngineScore(
                    engine,
                    iv.estimate,
                    iv.low,
                    iv.high,
                    None,
                    None,
                    None,
                    None,
                    False,
                    f.details,
                    f.latency,
                )
            )
            continue
        d = difference(f, base, inp.clusters)
        m = switching_margin(ctx.options.team, in_fleet=engine in fleet)
        out.append(
            EngineScore(
                engine,
                iv.estimate,
                iv.low,
                iv.high,
                d.estimate,
                d.low,
                d.high,
                m,
                d.low > m,
                f.details,
                f.latency,
            )
        )
    return out


def _feasible(inp: ClassInput, ctx: DecisionContext) -> tuple[list[Feasibility], list[str]]:
    """Every engine through the rules; raises :class:`UsageError` when none may serve."""
    facts = ClassFacts(inp.name, inp.concurrency_p90, inp.num_tenants)
    opts = ctx.options
    feas = [
        feasibility(e, facts, ctx.hardware, opts.exposure, opts.engines, ctx.advisories)
        for e in ENGINES
    ]
    feasible = [f.engine for f in feas if f.feasible]
    if not feasible:
        raise UsageError(
            f"no engine can serve the {inp.name} class: "
            + "; ".join(f"{f.engine}: {f.citations[-1].outcome}" for f in feas),
            hint="widen --engines, or change --exposure",
        )
    return feas, feasible


def _margin_citations(scores: list[EngineScore], incumbent: str, where: str) -> list[Citation]:
    return [
        Citation(
            "switching_margin",
            f"{where}.scores[{s.engine}].vs_incumbent_low",
            _pp(s.vs_incumbent_low or 0.0),
            f"> {s.margin * 100:.1f} pp over {ENGINE_NAMES[incumbent]}",
            "clears" if s.clears_margin else "does not clear",
        )
        for s in scores
        if s.margin is not None
    ]


def _requests_to_decide(
    n: int, scores: list[EngineScore], moved: bool, enough: bool, minimum: int
) -> int | None:
    """The class minimum for a small class; else, when the incumbent stays, how many
    requests would settle the closest challenger's comparison."""
    if not enough:
        return minimum
    challengers = [s for s in scores if s.margin is not None]
    closest = max(challengers, key=lambda s: s.vs_incumbent or 0.0, default=None)
    if moved or closest is None or closest.margin is None:
        return None
    interval = Interval(
        closest.vs_incumbent or 0.0,
        closest.vs_incumbent_low or 0.0,
        closest.vs_incumbent_high or 0.0,
    )
    return requests_to_resolve(n, interval, closest.margin)


def decide_class(inp: ClassInput, ctx: DecisionContext, fleet: set[str]) -> ClassDecision:
    """Decide one class; ``fleet`` holds the engines already chosen (for the margin)."""
    where = f"classes[{inp.name}]"
    feas, feasible = _feasible(inp, ctx)
    incumbent = _incumbent(inp.name, feasible, ctx.current)
    figures = {e: ctx.evidence.figures(inp.requests, e, ctx.hardware) for e in feasible}
    scores = _scores(inp, figures, incumbent, ctx, fleet)
    minimum = ctx.options.min_class_requests
    enough = len(inp.requests) >= minimum
    citations = [
        Citation(
            "min_class_requests",
            f"{where}.num_requests",
            str(len(inp.requests)),
            f">= {minimum}",
            "decided" if enough else "too few: keeps the incumbent",
        )
    ]
    winners = sorted(
        (s for s in scores if s.clears_margin and enough),
        key=lambda s: s.vs_incumbent_low or 0.0,
        reverse=True,
    )
    engine = winners[0].engine if winners else incumbent
    citations.extend(_margin_citations(scores, incumbent, where))
    citations.extend(target_citations(scores, ctx.options.slo, where))
    needed = _requests_to_decide(len(inp.requests), scores, engine != incumbent, enough, minimum)
    cap_evidence = ctx.capacity_evidence or ctx.evidence
    cap_figures = (
        figures
        if cap_evidence is ctx.evidence
        else {e: cap_evidence.figures(inp.requests, e, ctx.hardware) for e in feasible}
    )
    values = [f.value for f in cap_figures.values()]
    spread = max(values) - min(values)
    capacity = plan_capacity(
        inp.requests, cap_evidence, ctx.hardware, cap_figures[engine], inp.overlap, spread, where
    )
    citations.extend(capacity.citations)
    move = Move.STAY if engine == incumbent else (Move.SWITCH if engine in fleet else Move.ADD)
    lever = (
        capacity.lever
        if capacity.lever is Lever.CAPACITY
        else (Lever.ENGINE if move is not Move.STAY else Lever.NONE)
    )
    prior = _prior(inp.overlap, engine, scores)
    if not enough and prior.engine is not None:
        prior = replace(prior, borne_out=None, text=f"{prior.text}; too few requests to test it")
    citations.append(
        Citation(
            "band_prior",
            f"{where}.overlap",
            f"{inp.overlap:.1%}",
            f"< {EQUIVALENT_BELOW:.0%}: vLLM; > {RADIX_ABOVE:.0%}: SGLang",
            prior.text,
        )
    )
    headline = _headline(inp.name, engine, incumbent, move, lever, scores, capacity, ctx)
    headline += slo_headline(scores, engine, ctx.options.slo, ENGINE_NAMES)
    if not enough:
        headline = (
            f"{inp.name}: {ENGINE_NAMES[engine]} (stay): {len(inp.requests)} requests are too "
            f"few to tell engines apart (at least {ctx.options.min_class_requests})"
        )
    return ClassDecision(
        workload=inp.name,
        num_requests=len(inp.requests),
        share_of_requests=inp.share_of_requests,
        overlap=inp.overlap,
        concurrency_p90=inp.concurrency_p90,
        num_tenants=inp.num_tenants,
        isolated_overlap=inp.isolated_overlap,
        incumbent=incumbent,
        engine=engine,
        move=move,
        lever=lever,
        headline=headline,
        feasibility=feas,
        scores=scores,
        prior=prior,
        capacity=capacity,
        requests_to_decide=needed,
        citations=citations,
    )


def _headline(
    name: str,
    engine: str,
    incumbent: str,
    move: Move,
    lever: Lever,
    scores: list[EngineScore],
    capacity: CapacityPlan,
    ctx: DecisionContext,
) -> str:
    metric = ctx.evidence.metric.replace("_", " ")
    chosen = next(s for s in scores if s.engine == engine)
    if move is not Move.STAY:
        engine_text = (
            f"{ENGINE_NAMES[engine]}: {_pp(chosen.vs_incumbent or 0.0)} {metric} "
            f"[{_pp(chosen.vs_incumbent_low or 0.0)}, {_pp(chosen.vs_incumbent_high or 0.0)}] "
            f"over {ENGINE_NAMES[incumbent]}, above the {(chosen.margin or 0) * 100:.1f} pp "
            f"margin for a team of {ctx.options.team.size} ({ctx.options.team.ops.value} ops)"
        )
    else:
        others = [s for s in scores if s.margin is not None]
        best = max(others, key=lambda s: s.vs_incumbent or 0.0, default=None)
        engine_text = f"{ENGINE_NAMES[engine]} (stay)"
        if best is not None:
            low, high = best.vs_incumbent_low or 0.0, best.vs_incumbent_high or 0.0
            verdict = (
                "the engines are equal on this evidence"
                if low <= 0.0 <= high
                else f"not worth another engine for a team of {ctx.options.team.size} "
                f"({ctx.options.team.ops.value} ops)"
                if low > 0
                else f"{ENGINE_NAMES[engine]} is ahead"
            )
            engine_text += (
                f": {ENGINE_NAMES[best.engine]} {_pp(best.vs_incumbent or 0.0)} "
                f"[{_pp(low)}, {_pp(high)}] is below the {(best.margin or 0) * 100:.1f} pp "
                f"margin; {verdict}"
            )
    if lever is Lever.CAPACITY:
        need = capacity.pool_for_target_tokens
        need_text = (
            f"a {need:,}-token pool reaches {capacity.target_share:.0%} of it"
            if need is not None
            else f"no swept pool (up to {capacity.sweep[-1].capacity_tokens:,} tokens) reaches "
            f"{capacity.target_share:.0%} of it"
        )
        reps = capacity.replicas
        rep_text = (
            f"; {reps.num_replicas} replicas: {reps.cache_aware:.1%} with cache-aware routing, "
            f"{reps.round_robin:.1%} round robin"
            if reps is not None
            else ""
        )
        return (
            f"{name}: capacity, not the engine: {ENGINE_NAMES[engine]} caches "
            f"{capacity.value_at_pool:.1%} at the {capacity.pool_tokens:,}-token pool against an "
            f"ideal {capacity.ideal:.1%}; {need_text}{rep_text}. Engine: {engine_text}"
        )
    return f"{name}: {engine_text}"


def decide(inputs: Sequence[ClassInput], ctx: DecisionContext) -> list[ClassDecision]:
    """Decide classes largest first, so a small class can reuse an engine a large one
    brought in at half the margin."""
    fleet = set(ctx.current.values()) or {DEFAULT_ENGINE}
    decisions = []
    for inp in sorted(inputs, key=lambda i: -i.share_of_requests):
        d = decide_class(inp, ctx, fleet)
        fleet.add(d.engine)
        decisions.append(d)
    return decisions
