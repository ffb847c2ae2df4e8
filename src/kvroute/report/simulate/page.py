"""The HTML report of ``kvroute simulate``: engines against the ideal, then each measure."""

from __future__ import annotations

import itertools
from datetime import datetime

from kvroute.cache.result import EngineRun, SimulationResult
from kvroute.report import fmt
from kvroute.report.charts.svg import Bars, RefLine, Series, bar_chart, line_chart
from kvroute.report.page.html import (
    Block,
    Callout,
    CalloutKind,
    Chart,
    DefinitionList,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
)
from kvroute.report.simulate.console import capacity_line, saturation_text, slots_text
from kvroute.report.simulate.validation import validation_section
from kvroute.validate.result import ValidationResult

MODELS: tuple[tuple[str, str], ...] = (
    (
        "llama.cpp (llamacpp)",
        "llama.cpp server as vendored in llama-cpp-python 0.3.36: --parallel slots sharing -c tokens; a request "
        "takes the idle slot whose tokens share the largest fraction of its prompt (above "
        "--slot-prompt-similarity, 0.10), else the least recently used one, and reuses the longest common "
        "prefix with it; the --cache-ram host prompt cache saves and restores whole slots.",
    ),
    (
        "vLLM (vllm)",
        "vLLM V1 automatic prefix caching: 16-token blocks keyed by chained hashes, full blocks only, hits capped "
        "at prompt length - 1 and block aligned, blocks of running requests pinned by reference counts, freed "
        "blocks appended to an LRU free queue tail-first, eviction when a block is reallocated.",
    ),
    (
        "SGLang (sglang)",
        "SGLang RadixAttention: a radix tree of tokens (page size 1) or pages, hits capped at prompt length - 1, "
        "running paths locked, prompt inserted at prefill and prompt + output at finish, LRU leaf eviction "
        "cascading to parents; FCFS or cache-aware LPM scheduling.",
    ),
)

DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "Hit ratio",
        "Prompt tokens the engine serves from its prefix cache over all prompt tokens of the trace "
        "(a rejected request counts as a miss).",
    ),
    (
        "Ideal",
        "What an infinite cache that never evicts would serve (kvroute analyze): token level for token "
        "traces; for hash-only traces whole blocks plus the partial last block of a prompt that repeats an earlier one whole. Engines also recompute the last prompt token, so they "
        "stay slightly below it even with unbounded memory.",
    ),
    ("Computed / cached", "Prompt tokens prefilled vs served from cache, over admitted requests."),
    (
        "Evicted",
        "Cached tokens dropped from the KV pool to make room. For llama.cpp: tokens dropped from slots "
        "(overwritten, cleared after saving to host memory, or purged).",
    ),
    (
        "Peak pinned",
        "Most KV memory held at once by running requests (their hits, new tokens and output reservation).",
    ),
    (
        "Wait",
        "Time from arrival until the engine had room (a slot, memory, a running-request limit).",
    ),
)


def _share_labels(edges: list[float]) -> list[str]:
    return [f"{100 * lo:.0f}–{100 * hi:.0f} %" for lo, hi in itertools.pairwise(edges)]


def _best_callout(r: SimulationResult) -> Callout | None:
    """Which engine serves the most from cache, against the others and the ideal."""
    engines = r.engines
    if not engines:
        return None
    # A saturated engine's hit ratio is a backlog's: it cannot be the one to pick.
    keeping_up = [e for e in engines if e.saturation is None or not e.saturation.saturated]
    best = max(keeping_up or engines, key=lambda e: e.hit_ratio)
    ideal_text = (
        f" The ideal (infinite) cache would serve {fmt.percent(r.ideal.hit_ratio)}."
        if r.ideal is not None
        else ""
    )
    return Callout(
        CalloutKind.INFO,
        f"{best.engine} serves the most prompt tokens from cache: {fmt.percent(best.hit_ratio)}",
        " · ".join(f"{e.engine} {fmt.percent(e.hit_ratio)}" for e in engines) + "." + ideal_text,
    )


def _run_facts(r: SimulationResult) -> KeyValues:
    """The trace, the KV pool and how the replay was timed."""
    tr = r.trace
    return KeyValues(
        [
            ("trace", f"{tr.path} ({tr.format})"),
            ("requests", fmt.count(tr.num_requests)),
            ("prompt tokens", fmt.count(tr.prompt_tokens)),
            (
                "prompts known as",
                tr.prompt_form
                + (f", tokenizer {tr.tokenizer}" if tr.tokenizer else "")
                + (f", {tr.block_size_tokens}-token blocks" if tr.block_size_tokens else ""),
            ),
            ("KV pool", capacity_line(r)),
            *[
                ("llama.cpp slots", slots_text(slots))
                for run in r.engines
                if run.engine == "llamacpp"
                for slots in [run.settings.get("num_slots")]
                if isinstance(slots, int)
            ],
            ("arrivals", r.replay.arrivals),
            (
                "run times",
                f"{fmt.count(r.replay.num_trace_run_times)} from the trace; others "
                f"{r.replay.prefill_tokens_per_s:,.0f} prefill tok/s + {r.replay.decode_tokens_per_s:,.0f} decode tok/s",
            ),
            ("simulation time", fmt.duration(r.elapsed_s)),
        ]
    )


def _lead(r: SimulationResult) -> list[Block]:
    lead: list[Block] = []
    if r.trace.tokenizer_warning is not None:
        lead.append(Callout(CalloutKind.WARN, "Wrong tokenizer?", r.trace.tokenizer_warning))
    best = _best_callout(r)
    if best is not None:
        lead.append(best)
    for run in r.engines:
        verdict = saturation_text(run)
        if verdict is not None:
            lead.append(Callout(CalloutKind.WARN, f"{run.engine} is saturated", verdict))
    lead.append(_run_facts(r))
    for note in r.notes:
        lead.append(Callout(CalloutKind.WARN, "Note", note))
    return lead


_HIT_HEADERS: tuple[str, ...] = (
    "engine",
    "hit ratio",
    "cached tokens",
    "computed tokens",
    "requests with a hit",
    "evicted",
    "peak pinned",
    "peak running",
    "rejected",
    "wait p90",
)


def _hit_row(e: EngineRun) -> list[str]:
    return [
        e.engine,
        fmt.percent(e.hit_ratio),
        fmt.count(e.cached_tokens),
        fmt.count(e.computed_tokens),
        fmt.percent(e.share_requests_with_hit),
        fmt.tokens(e.evicted_tokens),
        fmt.tokens(e.peak_pinned_tokens)
        + ("" if e.peak_pinned_bytes is None else f" ({fmt.byte_size(e.peak_pinned_bytes)})"),
        str(e.peak_running),
        fmt.count(e.num_rejected),
        ("n/a" if e.wait_s.p90 is None else fmt.duration(e.wait_s.p90))
        + (" (saturated)" if e.saturation is not None and e.saturation.saturated else ""),
    ]


def _hit_section(r: SimulationResult) -> Section:
    """Each engine's hit ratio (and the ideal's) as bars, then every engine's figures."""
    bars = [(e.engine, e.hit_ratio) for e in r.engines]
    if r.ideal is not None:
        bars.append((f"ideal ({r.ideal.granularity})", r.ideal.hit_ratio))
    chart = bar_chart(
        [b[0] for b in bars],
        [b[1] for b in bars],
        title="Prompt tokens served from the prefix cache",
        x_label="engine",
        y_label="hit ratio",
        percent=True,
        horizontal=True,
    )
    return Section(
        "Hit ratio by engine",
        [Chart(chart), Table(list(_HIT_HEADERS), [_hit_row(e) for e in r.engines])],
    )


def _per_request_section(engines: list[EngineRun]) -> Section:
    """How much of each prompt came from cache, as a histogram per engine."""
    if not (engines and engines[0].per_request_hit.count):
        return Section("Per-request hits", [Paragraph("No admitted requests.")])
    edges = engines[0].per_request_hit.hist_edges
    series = [
        Bars(
            e.engine,
            [c / max(e.per_request_hit.count, 1) for c in e.per_request_hit.hist_counts],
        )
        for e in engines
    ]
    chart = bar_chart(
        _share_labels(edges),
        series,
        title="Share of each prompt served from cache",
        x_label="cached share of the prompt",
        y_label="share of requests",
        percent=True,
    )
    return Section("Per-request hits", [Chart(chart)])


def _prefill_section(engines: list[EngineRun]) -> Section:
    chart = bar_chart(
        [e.engine for e in engines],
        [
            Bars("computed", [float(e.computed_tokens) for e in engines]),
            Bars("saved (cached)", [float(e.cached_tokens) for e in engines]),
        ],
        title="Prompt tokens prefilled and saved",
        x_label="engine",
        y_label="tokens",
    )
    return Section("Prefill computed vs saved", [Chart(chart)])


def _memory_section(engines: list[EngineRun]) -> Section:
    """Evicted and peak pinned tokens in a sentence (six numbers of two scales on one
    axis hid the small ones), then each engine's own counters."""
    summary = Paragraph(
        "Cached tokens evicted for room: "
        + ", ".join(f"{e.engine} {fmt.count(e.evicted_tokens)}" for e in engines)
        + ". Most tokens held by running requests at once (peak pinned): "
        + ", ".join(f"{e.engine} {fmt.count(e.peak_pinned_tokens)}" for e in engines)
        + "."
    )
    counters = [
        Paragraph(
            f"{e.engine} counters: "
            + ", ".join(f"{k.replace('_', ' ')} {fmt.count(v)}" for k, v in e.counters.items())
        )
        for e in engines
        if e.counters
    ]
    return Section("Memory and evictions", [summary, *counters])


def _sweep_section(r: SimulationResult) -> Section:
    """Hit ratio against KV pool size, one line per engine, the ideal dashed."""
    refs = [] if r.ideal is None else [RefLine(r.ideal.hit_ratio, "ideal")]
    pool = r.capacity.tokens
    marks = [] if pool is None else [RefLine(pool, f"simulated pool {fmt.capacity(pool)}")]
    chart = line_chart(
        [Series(c.engine, c.capacity_tokens, c.hit_ratio) for c in r.sweep],
        title="Hit ratio vs KV capacity",
        x_label="capacity (tokens)",
        y_label="hit ratio",
        log_x=True,
        percent_y=True,
        y_min=0,
        hlines=refs,
        vlines=marks,
    )
    return Section(
        "Hit ratio vs KV capacity",
        [
            Paragraph(
                "Each engine replayed at each KV pool size; the dashed lines are the ideal "
                "cache and the pool simulated above."
            ),
            Chart(chart),
        ],
    )


def simulation_page(
    result: SimulationResult, generated_at: datetime, validation: ValidationResult | None = None
) -> Page:
    r = result
    sections = [
        _hit_section(r),
        _per_request_section(r.engines),
        _prefill_section(r.engines),
        _memory_section(r.engines),
    ]
    if validation is not None:
        sections.insert(0, validation_section(validation))
    if r.sweep:
        sections.append(_sweep_section(r))
    sections.append(Section("What each model follows", [DefinitionList(MODELS)]))
    sections.append(Section("Definitions", [DefinitionList(DEFINITIONS)]))
    return Page(
        title="kvroute simulate: engine prefix caches on your trace",
        subtitle=r.trace.path,
        lead=_lead(r),
        sections=sections,
        generated_at=generated_at,
    )
