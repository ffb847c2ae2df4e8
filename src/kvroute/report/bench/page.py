"""The HTML report of ``kvroute bench``: summary table, latency CDFs per run,
throughput and latency against offered load for sweeps, TTFT split by cache hit and
miss, errors, definitions. And the comparison page of ``kvroute bench compare``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from kvroute.bench import metrics
from kvroute.bench.compare import Pair, mismatches
from kvroute.bench.result import BenchResult, Run
from kvroute.report import fmt
from kvroute.report.bench.charts import cdf_chart, hit_split_blocks, itl_chart, sweep_blocks
from kvroute.report.bench.console import INTERRUPTED_TITLE, interrupted_text, run_cells
from kvroute.report.bench.rows import (
    DIFF_HEADERS,
    RUN_HEADERS,
    SUMMARY_GROUPS,
    compute_text,
    diff_cells,
    endpoint_caveats,
    error_lines,
    run_label,
    shown_headers,
    stat_cells,
)
from kvroute.report.page.html import (
    Block,
    Callout,
    CalloutKind,
    DefinitionList,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
)

DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "Scheduled time",
        "When the schedule meant the request to be sent (open loop: its absolute offset; "
        "closed loop or a follow-up turn: the previous end plus think time). Every latency is measured from it, "
        "so a slow client or server is charged for the wait (no coordinated omission).",
    ),
    (
        "TTFT",
        "First chunk carrying content, reasoning or a tool-call delta, minus the scheduled time. Role-only "
        "chunks do not count; the first byte is reported separately.",
    ),
    ("TPOT", "(last token − first token) / (N − 1) per request, N = usage.completion_tokens."),
    ("ITL", "Every gap between consecutive content chunks."),
    ("E2E", "End of the response minus the scheduled time."),
    ("Engine hit", "Cached / prompt tokens from the engine's /metrics counters over the run."),
    (
        "Response hit",
        "Σ cached / Σ prompt tokens from each response (timings.cache_n or usage.prompt_tokens_details).",
    ),
    (
        "Cache hit / miss",
        f"A request is a hit when the engine reports ≥ {metrics.HIT_SHARE:.0%} of its prompt cached.",
    ),
    ("Rate achieved", "Actual send rate / scheduled send rate over the sent requests."),
    ("Goodput", "Successful requests meeting every SLO, per second of the run."),
)


def _workload_facts(result: BenchResult) -> KeyValues:
    """The workload, its endpoints and how the runs were scheduled."""
    w = result.workload
    endpoints = sorted(
        {
            f"{r.endpoint.name} ("
            + ", ".join(
                p for p in (r.endpoint.engine or "unknown engine", compute_text(r.endpoint)) if p
            )
            + ")"
            for r in result.runs
        }
    )
    return KeyValues(
        [
            (
                "workload",
                f"{w.name} ({', '.join(f'{k}={v}' for k, v in w.params.items()) or 'defaults'}), seed {w.seed}",
            ),
            ("requests", fmt.count(w.num_requests)),
            (
                "prompt tokens p50 / p99",
                f"{fmt.tokens(w.prompt_tokens.p50)} / {fmt.tokens(w.prompt_tokens.p99)}",
            ),
            (
                "ideal prefix overlap",
                "not checked" if w.ideal_overlap is None else fmt.percent(w.ideal_overlap),
            ),
            ("endpoints", ", ".join(endpoints)),
            ("side by side", result.side_by_side),
            ("tokenizer", w.tokenizer),
            ("elapsed", fmt.duration(result.elapsed_s)),
        ]
    )


def _latency_table(runs: Sequence[Run]) -> Table:
    """Percentiles of every latency figure, one row per run and figure."""
    return Table(
        ["run", "figure", "p50", "p90", "p95", "p99", "max"],
        [
            [run_label(r), name, *stat_cells(st)]
            for r in runs
            for name, st in (
                ("TTFT", r.summary.ttft_s),
                ("first byte", r.summary.first_byte_s),
                ("TPOT", r.summary.tpot_s),
                ("ITL", r.summary.itl_s),
                ("E2E", r.summary.e2e_s),
                ("dispatch delay", r.summary.dispatch_delay_s),
            )
        ],
    )


def _latency_blocks(runs: Sequence[Run]) -> list[Block]:
    return [
        cdf_chart(runs, "Time to first token (CDF)", metrics.ttft_s),
        cdf_chart(runs, "Time per output token (CDF)", metrics.tpot_s),
        cdf_chart(runs, "End-to-end latency (CDF)", metrics.e2e_s),
        itl_chart(runs),
        _latency_table(runs),
    ]


def _errors_table(runs: Sequence[Run]) -> Table:
    return Table(
        ["run", "errors", "notes"],
        [
            [run_label(r), ", ".join(error_lines(r)) or "none", "; ".join(r.endpoint.notes) or "—"]
            for r in runs
        ],
    )


def _interrupted_callouts(*results: tuple[str, BenchResult]) -> list[Block]:
    """A warning for each result stopped by Ctrl-C, ``(name, result)``; name may be ""."""
    callouts: list[Block] = []
    for name, result in results:
        text = interrupted_text(result)
        if text is not None:
            title = f"{name}: {INTERRUPTED_TITLE}" if name else INTERRUPTED_TITLE
            callouts.append(Callout(CalloutKind.WARN, title, text))
    return callouts


def _summary_tables(runs: Sequence[Run]) -> list[Block]:
    """Every run's figures, in two tables that each fit a 1,400 px screen."""
    shown = shown_headers(runs)
    rows = [dict(zip(RUN_HEADERS, run_cells(r), strict=True)) for r in runs]
    tables: list[Block] = []
    for title, group in SUMMARY_GROUPS:
        headers = [h for h in group if h in shown]
        tables.append(Table(headers, [[row[h] for h in headers] for row in rows], caption=title))
    return tables


def _headline_callouts(runs: Sequence[Run]) -> list[Block]:
    """The conclusion at each load, when two or more endpoints ran it: which had the
    lowest TTFT p50 and by how much, and the engine-hit difference; and a caveat when
    the endpoints did not run alike (cache state, model, threads)."""
    blocks: list[Block] = []
    by_load: dict[str, list[Run]] = {}
    for run in runs:
        if run.repeat == 0:
            by_load.setdefault(run.load.label, []).append(run)
    lines = []
    for label, group in by_load.items():
        timed = [r for r in group if r.summary.ttft_s.p50 is not None]
        if len(timed) < 2:
            continue
        timed.sort(key=lambda r: r.summary.ttft_s.p50 or 0.0)
        best, other = timed[0], timed[1]
        lines.append(
            f"{label}: {best.endpoint.name} vs {other.endpoint.name} " + _versus(best, other)
        )
    if lines:
        blocks.append(
            Callout(
                CalloutKind.INFO,
                "Lowest TTFT p50 at each load",
                " · ".join(lines) + ". One run each: `kvroute bench compare` with --repeats "
                "judges the noise.",
            )
        )
    first_load = next(iter(by_load.values()), [])
    caveats = endpoint_caveats(first_load)
    if caveats:
        blocks.append(
            Callout(CalloutKind.WARN, "The endpoints did not run alike", " ".join(caveats))
        )
    return blocks


def _versus(best: Run, other: Run) -> str:
    a, b = best.summary, other.summary
    parts = []
    if a.ttft_s.p50 is not None and b.ttft_s.p50:
        parts.append(f"TTFT p50 {fmt.relative(a.ttft_s.p50 / b.ttft_s.p50 - 1)}")
    hit_a, hit_b = a.cache.engine_hit_rate, b.cache.engine_hit_rate
    if hit_a is not None and hit_b is not None:
        parts.append(f"engine hit {(hit_a - hit_b) * 100:+.1f} pp")
    if a.tpot_s.p50 is not None and b.tpot_s.p50:
        parts.append(f"TPOT p50 {fmt.relative(a.tpot_s.p50 / b.tpot_s.p50 - 1)}")
    return ", ".join(parts)


def bench_page(result: BenchResult, generated_at: datetime) -> Page:
    runs = result.runs
    return Page(
        title="kvroute bench" + (" (interrupted)" if result.interrupted else ""),
        subtitle=f"{result.workload.name} against "
        + fmt.plural(len({r.endpoint.name for r in runs}), "endpoint"),
        lead=[
            *_interrupted_callouts(("", result)),
            *_headline_callouts(runs),
            _workload_facts(result),
            *_summary_tables(runs),
        ],
        sections=[
            Section("Latency", _latency_blocks(runs)),
            Section("Throughput vs load", sweep_blocks(runs)),
            Section("TTFT by cache hit and miss", hit_split_blocks(runs)),
            Section("Errors and notes", [_errors_table(runs)]),
            Section("Definitions", [DefinitionList(DEFINITIONS)]),
        ],
        generated_at=generated_at,
    )


def compare_page(a: BenchResult, b: BenchResult, pairs: list[Pair], generated_at: datetime) -> Page:
    sections = []
    for pair in pairs:
        runs_a = [
            r for r in a.runs if r.endpoint.name == pair.endpoint_a and r.load.label == pair.load
        ]
        runs_b = [
            r for r in b.runs if r.endpoint.name == pair.endpoint_b and r.load.label == pair.load
        ]
        named = [_renamed(r, "A") for r in runs_a[:1]] + [_renamed(r, "B") for r in runs_b[:1]]
        unlike = [
            Callout(CalloutKind.WARN, "A and B did not run alike", " ".join(caveats))
            for caveats in [endpoint_caveats(named)]
            if caveats
        ]
        sections.append(
            Section(
                f"A {pair.endpoint_a} vs B {pair.endpoint_b} · {pair.load}",
                [
                    *unlike,
                    Paragraph(
                        "Noise: "
                        + (
                            "run-to-run spread over repeats."
                            if pair.noise == "repeats"
                            else "bootstrap 95 % interval of B − A (requests resampled)."
                        )
                    ),
                    Table(
                        DIFF_HEADERS,
                        [diff_cells(d) for d in pair.diffs if d.a is not None or d.b is not None],
                    ),
                    cdf_chart(named, "Time to first token (CDF)", metrics.ttft_s),
                    cdf_chart(named, "End-to-end latency (CDF)", metrics.e2e_s),
                ],
            )
        )
    if not sections:
        sections.append(
            Section("No pairs", [Paragraph("The results share no endpoint and load label.")])
        )
    lead = _interrupted_callouts(("A", a), ("B", b))
    differ = mismatches(a, b)
    if differ:
        lead.insert(
            0,
            Callout(
                CalloutKind.WARN,
                "A and B are different experiments",
                "; ".join(differ) + ". The differences below mix the engines with the "
                "workloads: they say nothing about the engines alone.",
            ),
        )
    return Page(
        title="kvroute bench compare",
        subtitle=f"A: {a.workload.name} · B: {b.workload.name}",
        lead=lead,
        sections=sections,
        generated_at=generated_at,
    )


def _renamed(run: Run, tag: str) -> Run:
    return replace(run, endpoint=replace(run.endpoint, name=f"{tag} {run.endpoint.name}"))
