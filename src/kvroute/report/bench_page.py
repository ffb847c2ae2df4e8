"""The HTML report of ``kvroute bench``: summary table, latency CDFs per run,
throughput and latency against offered load for sweeps, TTFT split by cache hit and
miss, errors, definitions. And the comparison page of ``kvroute bench compare``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from kvroute.bench import metrics
from kvroute.bench.compare import Pair
from kvroute.bench.record import Outcome, RequestRecord
from kvroute.bench.result import BenchResult, Run
from kvroute.report import fmt
from kvroute.report.bench_rows import (
    DIFF_HEADERS,
    RUN_HEADERS,
    diff_cells,
    error_lines,
    run_label,
    run_row,
    stat_cells,
)
from kvroute.report.html import (
    Block,
    Chart,
    DefinitionList,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
    write_page,
)
from kvroute.report.svg import Series, Shape, line_chart

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


def _cdf_series(name: str, values: Sequence[float]) -> Series | None:
    v = np.sort(np.asarray([x for x in values if np.isfinite(x)], dtype=np.float64))
    if v.size == 0:
        return None
    pick = np.unique(np.linspace(0, v.size - 1, min(v.size, 200)).astype(np.int64))
    return Series(
        name, [float(v[i]) for i in pick], [float((i + 1) / v.size) for i in pick], shape=Shape.STEP
    )


def _values(
    records: Sequence[RequestRecord], fn: Callable[[RequestRecord], float | None]
) -> list[float]:
    return [v for r in records if r.outcome is Outcome.OK and (v := fn(r)) is not None]


def _cdf_chart(
    runs: Sequence[Run],
    title: str,
    fn: Callable[[RequestRecord], float | None],
    label: str = run_label.__name__,
) -> Block:
    series = [
        s
        for run in runs
        if (s := _cdf_series(run_label(run), _values(run.requests, fn))) is not None
    ]
    if not series:
        return Paragraph(f"{title}: no data.")
    return Chart(
        line_chart(
            series,
            title=title,
            x_label="seconds",
            y_label="share of requests ≤ x",
            percent_y=True,
            y_min=0,
            y_max=1,
        )
    )


def _itl_chart(runs: Sequence[Run]) -> Block:
    series = [
        s
        for run in runs
        if (
            s := _cdf_series(
                run_label(run),
                [g for r in run.requests if r.outcome is Outcome.OK for g in metrics.itl_s(r)],
            )
        )
        is not None
    ]
    if not series:
        return Paragraph("ITL: no data.")
    return Chart(
        line_chart(
            series,
            title="Inter-token latency (CDF)",
            x_label="seconds",
            y_label="share of gaps ≤ x",
            percent_y=True,
            y_min=0,
            y_max=1,
        )
    )


def _hit_split(runs: Sequence[Run]) -> list[Block]:
    series: list[Series] = []
    for run in runs:
        hits = [
            t
            for r in run.requests
            if r.outcome is Outcome.OK
            and (s := metrics.cache_share(r)) is not None
            and s >= metrics.HIT_SHARE
            and (t := metrics.ttft_s(r)) is not None
        ]
        misses = [
            t
            for r in run.requests
            if r.outcome is Outcome.OK
            and (s := metrics.cache_share(r)) is not None
            and s < metrics.HIT_SHARE
            and (t := metrics.ttft_s(r)) is not None
        ]
        for tag, vals in (("hit", hits), ("miss", misses)):
            s2 = _cdf_series(f"{run_label(run)} · {tag}", vals)
            if s2 is not None:
                series.append(s2)
    rows = [
        [
            run_label(r),
            "hit",
            fmt.count(r.summary.cache.num_hits),
            *stat_cells(r.summary.ttft_hit_s),
        ]
        for r in runs
    ]
    rows += [
        [
            run_label(r),
            "miss",
            fmt.count(r.summary.cache.num_misses),
            *stat_cells(r.summary.ttft_miss_s),
        ]
        for r in runs
    ]
    blocks: list[Block] = [
        Table(["run", "cache", "requests", "p50", "p90", "p95", "p99", "max"], rows)
    ]
    if series:
        blocks.append(
            Chart(
                line_chart(
                    series,
                    title="TTFT by engine-reported cache hit (CDF)",
                    x_label="seconds",
                    y_label="share of requests ≤ x",
                    percent_y=True,
                    y_min=0,
                    y_max=1,
                )
            )
        )
    else:
        blocks.append(Paragraph("No response carried a cache reading."))
    return blocks


def _sweep(runs: Sequence[Run]) -> list[Block]:
    steps = sorted({r.step for r in runs})
    if len(steps) < 2:
        return [
            Paragraph(
                "One load step: run a sweep (--rate 5,10,20 or --concurrency 1,4,16) for these charts."
            )
        ]
    by_endpoint: dict[str, list[Run]] = {}
    for run in runs:
        by_endpoint.setdefault(run.endpoint.name, []).append(run)

    def offered(run: Run) -> float:
        return float(run.load.rate_per_s or run.load.concurrency or run.step)

    x_label = (
        "requested rate (requests/s)" if runs[0].load.kind == "open" else "concurrency (users)"
    )
    thr, good, p99 = [], [], []
    for name, unsorted in by_endpoint.items():
        rs = sorted(unsorted, key=offered)
        xs = [offered(r) for r in rs]
        thr.append(
            Series(
                f"{name} throughput", xs, [r.summary.request_throughput_per_s or 0.0 for r in rs]
            )
        )
        if rs[0].summary.goodput is not None:
            good.append(
                Series(
                    f"{name} goodput",
                    xs,
                    [r.summary.goodput.per_s or 0.0 if r.summary.goodput else 0.0 for r in rs],
                )
            )
        p99.append(
            Series(f"{name} TTFT p99", xs, [r.summary.ttft_s.p99 or float("nan") for r in rs])
        )
    return [
        Chart(
            line_chart(
                thr + good,
                title="Throughput vs offered load",
                x_label=x_label,
                y_label="requests / s",
            )
        ),
        Chart(
            line_chart(p99, title="TTFT p99 vs offered load", x_label=x_label, y_label="seconds")
        ),
    ]


def bench_page(result: BenchResult, generated_at: datetime) -> Page:
    w = result.workload
    runs = result.runs
    lead: list[Block] = [
        KeyValues(
            [
                (
                    "workload",
                    f"{w.name} ({', '.join(f'{k}={v}' for k, v in w.params.items()) or 'defaults'}), seed {w.seed}",
                ),
                ("requests", fmt.count(w.num_requests)),
                (
                    "prompt tokens p50 / p99",
                    f"{fmt.tokens(w.prompt_tokens.p50 or 0)} / {fmt.tokens(w.prompt_tokens.p99 or 0)}",
                ),
                (
                    "ideal prefix overlap",
                    "not checked" if w.ideal_overlap is None else fmt.percent(w.ideal_overlap),
                ),
                (
                    "endpoints",
                    ", ".join(
                        sorted(
                            {
                                f"{r.endpoint.name} ({r.endpoint.engine or 'unknown engine'})"
                                for r in runs
                            }
                        )
                    ),
                ),
                ("side by side", result.side_by_side),
                ("tokenizer", w.tokenizer),
                ("elapsed", fmt.duration(result.elapsed_s)),
            ]
        ),
        Table(RUN_HEADERS, [run_row(r) for r in runs]),
    ]
    errors = [
        [run_label(r), ", ".join(error_lines(r)) or "none", "; ".join(r.endpoint.notes) or "—"]
        for r in runs
    ]
    latency = [
        _cdf_chart(runs, "Time to first token (CDF)", metrics.ttft_s),
        _cdf_chart(runs, "Time per output token (CDF)", metrics.tpot_s),
        _cdf_chart(runs, "End-to-end latency (CDF)", metrics.e2e_s),
        _itl_chart(runs),
        Table(
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
        ),
    ]
    return Page(
        title="kvroute bench",
        subtitle=f"{w.name} against {len({r.endpoint.name for r in runs})} endpoint(s)",
        lead=lead,
        sections=[
            Section("Latency", latency),
            Section("Throughput vs load", _sweep(runs)),
            Section("TTFT by cache hit and miss", _hit_split(runs)),
            Section("Errors and notes", [Table(["run", "errors", "notes"], errors)]),
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
        sections.append(
            Section(
                f"A {pair.endpoint_a} vs B {pair.endpoint_b} · {pair.load}",
                [
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
                    _cdf_chart(named, "Time to first token (CDF)", metrics.ttft_s),
                    _cdf_chart(named, "End-to-end latency (CDF)", metrics.e2e_s),
                ],
            )
        )
    if not sections:
        sections.append(
            Section("No pairs", [Paragraph("The results share no endpoint and load label.")])
        )
    return Page(
        title="kvroute bench compare",
        subtitle=f"A: {a.workload.name} · B: {b.workload.name}",
        sections=sections,
        generated_at=generated_at,
    )


def _renamed(run: Run, tag: str) -> Run:
    return replace(run, endpoint=replace(run.endpoint, name=f"{tag} {run.endpoint.name}"))


def write_bench_page(result: BenchResult, path: Path, generated_at: datetime | None = None) -> None:
    write_page(bench_page(result, generated_at or datetime.now(UTC)), path)


def write_compare_page(
    a: BenchResult,
    b: BenchResult,
    pairs: list[Pair],
    path: Path,
    generated_at: datetime | None = None,
) -> None:
    write_page(compare_page(a, b, pairs, generated_at or datetime.now(UTC)), path)
