"""The HTML report of ``kvroute advise``: the decision first, the evidence after, charts."""

from __future__ import annotations

from datetime import datetime

from kvroute.advise.decide import ENGINE_NAMES
from kvroute.advise.result import Advice, ClassDecision, Lever
from kvroute.report import fmt
from kvroute.report.charts.svg import Bars, RefLine, Series, bar_chart, line_chart
from kvroute.report.page.html import (
    Block,
    Callout,
    CalloutKind,
    Chart,
    Code,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
)


def _pp(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f} pp"


def _decision_table(a: Advice) -> Table:
    return Table(
        ["class", "requests", "overlap", "p90 in flight", "incumbent", "advised", "move", "lever"],
        [
            [
                d.workload,
                f"{fmt.count(d.num_requests)} ({fmt.percent(d.share_of_requests)})",
                fmt.percent(d.overlap),
                f"{d.concurrency_p90:.1f}",
                ENGINE_NAMES[d.incumbent],
                ENGINE_NAMES[d.engine],
                d.move.value,
                d.lever.value,
            ]
            for d in a.classes
        ],
    )


def _lead(a: Advice) -> list[Block]:
    capacity_led = any(d.lever is Lever.CAPACITY for d in a.classes)
    lead: list[Block] = [
        Callout(CalloutKind.WARN if capacity_led else CalloutKind.GOOD, "Advice", a.headline),
        _decision_table(a),
    ]
    lead.extend(Paragraph(d.headline) for d in a.classes)
    hw = a.hardware
    lead.append(
        KeyValues(
            [
                (
                    "trace",
                    f"{a.trace.path} ({a.trace.format}, {fmt.count(a.trace.num_requests)} requests)",
                ),
                ("prefix overlap (ideal)", fmt.percent(a.trace.overlap)),
                ("model / device", f"{hw.model} on {hw.num_gpus} x {hw.gpu} ({hw.device_kind})"),
                (
                    "KV pool",
                    f"{fmt.tokens(hw.pool_tokens)} tokens"
                    + (f"; fp8: {fmt.tokens(hw.fp8_pool_tokens)}" if hw.fp8_pool_tokens else ""),
                ),
                ("team", f"{a.inputs.team_size} people, {a.inputs.ops} ops, {a.inputs.exposure}"),
                (
                    "evidence",
                    a.inputs.evidence
                    + (
                        f" (latency asked for, not possible: {a.inputs.evidence_fallback})"
                        if a.inputs.evidence_fallback
                        else ""
                    ),
                ),
                ("scope", a.scope),
            ]
        )
    )
    for note in a.notes:
        lead.append(Callout(CalloutKind.INFO, "Note", note))
    return lead


def _scores_chart(a: Advice) -> Chart:
    engines = sorted({s.engine for d in a.classes for s in d.scores})
    bars = [
        Bars(
            ENGINE_NAMES[e],
            [next((s.value for s in d.scores if s.engine == e), float("nan")) for d in a.classes],
        )
        for e in engines
    ]
    svg = bar_chart(
        [d.workload for d in a.classes],
        bars,
        title=f"{a.inputs.evidence.replace('_', ' ')} by class and engine",
        x_label="class",
        y_label=a.inputs.evidence.replace("_", " "),
        percent=True,
    )
    return Chart(svg)


def _seconds(value: float | None) -> str:
    return "—" if value is None else fmt.duration(value)


def _latency_table(d: ClassDecision) -> Table | None:
    """What kvroute predict gave per engine, behind an SLO-attainment score."""
    scored = [(s.engine, s.latency) for s in d.scores if s.latency is not None]
    if not scored:
        return None
    targets = sorted({t for _, lat in scored for t in lat.attainment})
    return Table(
        ["engine", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"]
        + [f"within {t}" for t in targets]
        + ["saturation", "calibration"],
        [
            [
                ENGINE_NAMES[engine],
                _seconds(lat.ttft_p50_s),
                _seconds(lat.ttft_p99_s),
                _seconds(lat.tpot_p50_s),
                _seconds(lat.tpot_p99_s),
                *(fmt.percent(lat.attainment.get(t)) for t in targets),
                lat.verdict,
                f"{lat.calibration_source} (prior)" if lat.uses_prior else lat.calibration_source,
            ]
            for engine, lat in scored
        ],
        caption=f"kvroute predict on this class's requests ({scored[0][1].load}).",
    )


def _latency_chart(a: Advice) -> Chart | None:
    """Predicted TTFT p99 by class and engine, when the scores are latency."""
    if not any(s.latency for d in a.classes for s in d.scores):
        return None

    def p99(d: ClassDecision, engine: str) -> float:
        s = next((s for s in d.scores if s.engine == engine), None)
        v = s.latency.ttft_p99_s if s is not None and s.latency is not None else None
        return float("nan") if v is None else v

    engines = sorted({s.engine for d in a.classes for s in d.scores})
    svg = bar_chart(
        [d.workload for d in a.classes],
        [Bars(ENGINE_NAMES[e], [p99(d, e) for d in a.classes]) for e in engines],
        title="predicted TTFT p99 by class and engine",
        x_label="class",
        y_label="TTFT p99 (s)",
    )
    return Chart(svg)


def _class_section(d: ClassDecision) -> Section:
    blocks: list[Block] = [Paragraph(d.headline)]
    blocks.append(
        Table(
            [
                "engine",
                "figure",
                "95 % interval",
                "vs incumbent",
                "its interval",
                "margin",
                "clears",
            ],
            [
                [
                    ENGINE_NAMES[s.engine],
                    fmt.percent(s.value),
                    f"{fmt.percent(s.low)} – {fmt.percent(s.high)}",
                    _pp(s.vs_incumbent),
                    "—"
                    if s.vs_incumbent_low is None
                    else f"{_pp(s.vs_incumbent_low)} – {_pp(s.vs_incumbent_high)}",
                    "—" if s.margin is None else f"{s.margin * 100:.1f} pp",
                    "incumbent" if s.margin is None else ("yes" if s.clears_margin else "no"),
                ]
                for s in d.scores
            ],
            caption="Every engine replayed on this class's requests at the pool; differences are paired by request.",
        )
    )
    latency = _latency_table(d)
    if latency is not None:
        blocks.append(latency)
    blocks.append(Paragraph(f"Prior: {d.prior.text}."))
    blocks.append(
        Table(
            ["engine", "feasible", "conditions"],
            [
                [
                    ENGINE_NAMES[f.engine],
                    "yes" if f.feasible else "no",
                    "; ".join(f.conditions) or "—",
                ]
                for f in d.feasibility
            ],
        )
    )
    c = d.capacity
    if c is not None:
        blocks.append(
            Chart(
                line_chart(
                    [
                        Series(
                            ENGINE_NAMES[c.engine],
                            [p.capacity_tokens for p in c.sweep],
                            [p.value for p in c.sweep],
                        )
                    ],
                    title=f"{d.workload}: {ENGINE_NAMES[c.engine]} vs KV pool",
                    x_label="KV pool (tokens)",
                    y_label="prefill saved",
                    log_x=True,
                    percent_y=True,
                    y_min=0,
                    hlines=[
                        RefLine(c.ideal, "ideal"),
                        RefLine(c.ideal * c.target_share, f"{c.target_share:.0%} of ideal"),
                    ],
                    vlines=[RefLine(c.pool_tokens, "your pool")],
                )
            )
        )
        rows = [
            (
                "at your pool",
                f"{fmt.percent(c.value_at_pool)} of prompt tokens ({fmt.percent(c.share_of_ideal)} of the ideal {fmt.percent(c.ideal)})",
            ),
            (
                "pool for 90 % of ideal",
                "not reached in the sweep"
                if c.pool_for_target_tokens is None
                else f"{fmt.tokens(c.pool_for_target_tokens)} tokens",
            ),
        ]
        if c.value_with_fp8 is not None and c.fp8_pool_tokens is not None:
            rows.append(
                (
                    "fp8 KV",
                    f"{fmt.percent(c.value_with_fp8)} at {fmt.tokens(c.fp8_pool_tokens)} tokens",
                )
            )
        if c.replicas is not None:
            r = c.replicas
            rows.append(
                (
                    f"{r.num_replicas} replicas",
                    f"cache-aware {fmt.percent(r.cache_aware)} · round robin {fmt.percent(r.round_robin)}"
                    + (" · advised: the deployment runs them" if r.advised else " · not advised"),
                )
            )
        rows.append(("lever", c.lever.value))
        blocks.append(KeyValues(rows))
    if d.requests_to_decide is not None:
        blocks.append(
            Callout(
                CalloutKind.INFO,
                "Not settled",
                f"about {fmt.count(d.requests_to_decide)} requests of this class would settle the comparison",
            )
        )
    blocks.append(
        Table(
            ["rule", "field", "value", "threshold", "outcome"],
            [[c.rule, c.field, c.value, c.threshold, c.outcome] for c in d.citations],
            caption="Every step of the decision, with what it read.",
        )
    )
    return Section(f"Class {d.workload}", blocks)


def advise_page(advice: Advice, generated_at: datetime, gateway_yaml: str) -> Page:
    a = advice
    score_blocks: list[Block] = [_scores_chart(a)]
    latency = _latency_chart(a)
    if latency is not None:
        score_blocks.append(latency)
    sections = [Section("Scores", score_blocks)]
    sections.extend(_class_section(d) for d in a.classes)
    sections.append(
        Section(
            "Flags",
            [
                Table(
                    ["engine", "flag", "value", "reason"],
                    [
                        [ENGINE_NAMES[f.engine], fl.flag, fl.value or "", fl.reason]
                        for f in a.flags
                        for fl in f.flags
                    ]
                    + [
                        [ENGINE_NAMES[f.engine], "replicas", str(f.replicas), f.replicas_reason]
                        for f in a.flags
                    ],
                )
            ],
        )
    )
    if a.changes:
        sections.append(
            Section(
                "Against what runs today",
                [
                    Table(
                        ["class", "today", "advised", "move"],
                        [[c.workload, c.current or "—", c.advised, c.move] for c in a.changes],
                    )
                ],
            )
        )
    sections.append(Section("gateway.yaml", [Code(gateway_yaml)]))
    sections.append(
        Section(
            "Rules applied to the whole trace",
            [
                Table(
                    ["rule", "field", "value", "threshold", "outcome"],
                    [[c.rule, c.field, c.value, c.threshold, c.outcome] for c in a.citations],
                )
            ],
        )
    )
    return Page(
        title="kvroute advise: an engine per workload class",
        subtitle=a.trace.path,
        lead=_lead(a),
        sections=sections,
        generated_at=generated_at,
    )
