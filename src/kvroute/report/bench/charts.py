"""The charts of the bench pages: latency CDFs per run, throughput and TTFT p99 against
offered load (sweeps), and TTFT split by engine-reported cache hit and miss."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kvroute.bench import metrics
from kvroute.bench.record import Outcome, RequestRecord
from kvroute.bench.result import Run
from kvroute.report import fmt
from kvroute.report.bench.rows import run_label, stat_cells
from kvroute.report.charts.axes import wants_log
from kvroute.report.charts.svg import Series, Shape, line_chart
from kvroute.report.page.html import Block, Chart, Paragraph, Table


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


def cdf_chart(
    runs: Sequence[Run], title: str, fn: Callable[[RequestRecord], float | None]
) -> Block:
    """The CDF of ``fn`` over each run's successful requests, one line per run."""
    series = [
        s
        for run in runs
        if (s := _cdf_series(run_label(run), _values(run.requests, fn))) is not None
    ]
    if not series:
        return Paragraph(f"{title}: no data.")
    log_x = wants_log([x for s in series for x in s.xs])
    return Chart(
        line_chart(
            series,
            title=title,
            x_label="seconds (log scale)" if log_x else "seconds",
            log_x=log_x,
            y_label="share of requests ≤ x",
            percent_y=True,
            y_min=0,
            y_max=1,
        )
    )


def itl_chart(runs: Sequence[Run]) -> Block:
    """The CDF of every gap between content chunks, one line per run."""
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


def _ttfts(run: Run, *, hit: bool) -> list[float]:
    """TTFTs of the run's successful requests that were cache hits (or misses), as the
    engine reported them; requests without a cache reading are left out."""
    return [
        t
        for r in run.requests
        if r.outcome is Outcome.OK
        and (s := metrics.cache_share(r)) is not None
        and (s >= metrics.HIT_SHARE if hit else s < metrics.HIT_SHARE)
        and (t := metrics.ttft_s(r)) is not None
    ]


def _hit_split_table(runs: Sequence[Run]) -> Table:
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
    return Table(["run", "cache", "requests", "p50", "p90", "p95", "p99", "max"], rows)


FEW_REQUESTS = 5
"""Below this many requests on one side, the hit/miss split gets a caveat."""


def hit_split_blocks(runs: Sequence[Run]) -> list[Block]:
    """TTFT percentiles of cache hits and misses per run, then their CDFs."""
    series: list[Series] = []
    few: list[str] = []
    for run in runs:
        for tag, vals in (("hit", _ttfts(run, hit=True)), ("miss", _ttfts(run, hit=False))):
            # The count in the legend: a curve drawn from one request is one request.
            s = _cdf_series(f"{run_label(run)} · {tag} ({fmt.plural(len(vals), 'request')})", vals)
            if s is not None:
                series.append(s)
            if 0 < len(vals) < FEW_REQUESTS:
                few.append(f"{run_label(run)} {tag} ({len(vals)})")
    blocks: list[Block] = [_hit_split_table(runs)]
    if few:
        blocks.append(
            Paragraph(
                f"Too few requests to compare on one side: {', '.join(few)}. A hit slower "
                "than a miss from so few says nothing about the cache."
            )
        )
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


def _offered(run: Run) -> float:
    return float(run.load.rate_per_s or run.load.concurrency or run.step)


def _load_series(runs: Sequence[Run]) -> tuple[list[Series], list[Series], list[Series]]:
    """Throughput, goodput (when SLOs were set) and TTFT p99 per endpoint, against the
    offered load (requested rate, else concurrency)."""
    by_endpoint: dict[str, list[Run]] = {}
    for run in runs:
        by_endpoint.setdefault(run.endpoint.name, []).append(run)
    thr, good, p99 = [], [], []
    for name, unsorted in by_endpoint.items():
        rs = sorted(unsorted, key=_offered)
        xs = [_offered(r) for r in rs]
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
    return thr, good, p99


def sweep_blocks(runs: Sequence[Run]) -> list[Block]:
    """Throughput, goodput and TTFT p99 against offered load, one line per endpoint;
    a hint to run a sweep when there is one load step."""
    steps = sorted({r.step for r in runs})
    if len(steps) < 2:
        return [
            Paragraph(
                "One load step: run a sweep (--rate 5,10,20 or --concurrency 1,4,16) for these charts."
            )
        ]
    x_label = (
        "requested rate (requests/s)" if runs[0].load.kind == "open" else "concurrency (users)"
    )
    thr, good, p99 = _load_series(runs)
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
