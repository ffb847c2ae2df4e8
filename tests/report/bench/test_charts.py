"""The bench charts: a line per run from its own requests, the hit/miss split counted,
the sweep charts only when there is a sweep."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

from kvroute.bench import metrics
from kvroute.bench.record import ErrorKind, Outcome
from kvroute.report.bench.charts import cdf_chart, hit_split_blocks, sweep_blocks
from kvroute.report.page.html import Chart, Paragraph, Table

from .results import result, run


def legend(chart: Chart) -> list[str]:
    root = ET.fromstring(chart.svg)
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_a_cdf_has_one_line_per_run_named_after_it() -> None:
    runs = result(0.2).runs
    chart = cdf_chart(runs, "TTFT (CDF)", metrics.ttft_s)
    assert isinstance(chart, Chart)
    names = legend(chart)
    for label in ("llama · rate=2/s", "llama · rate=4/s", "vllm · rate=2/s", "vllm · rate=4/s"):
        assert label in names


def test_a_cdf_of_runs_where_every_request_failed_says_no_data() -> None:
    r = run("llama", 0, 2.0, 0.2, 90)
    failed = replace(
        r,
        requests=[
            replace(q, outcome=Outcome.ERROR, error_kind=ErrorKind.RESET) for q in r.requests
        ],
    )
    block = cdf_chart([failed], "TTFT (CDF)", metrics.ttft_s)
    assert block == Paragraph("TTFT (CDF): no data.")


def test_the_hit_split_counts_hits_and_misses_per_run() -> None:
    # every other request has 90 of 100 prompt tokens cached (a hit), the rest none
    r = run("llama", 0, 2.0, 0.2, cached=90)
    table, chart = hit_split_blocks([r])
    assert isinstance(table, Table) and isinstance(chart, Chart)
    assert [list(row[:3]) for row in table.rows] == [
        ["llama · rate=2/s", "hit", "10"],
        ["llama · rate=2/s", "miss", "10"],
    ]
    assert "llama · rate=2/s · hit (10 requests)" in legend(chart)


def test_a_side_with_few_requests_gets_a_caveat_and_none_read_says_so() -> None:
    r = run("llama", 0, 2.0, 0.2, cached=90)
    few = replace(r, requests=[*r.requests[:4]])  # requests 1 and 3 hit: 2 hits, 2 misses
    blocks = hit_split_blocks([few])
    assert any(isinstance(b, Paragraph) and "llama · rate=2/s hit (2)" in b.text for b in blocks)
    unread = replace(r, requests=[replace(q, cached_tokens=None) for q in r.requests])
    assert hit_split_blocks([unread])[-1] == Paragraph("No response carried a cache reading.")


def test_sweep_charts_need_two_load_steps() -> None:
    runs = result(0.2).runs
    (hint,) = sweep_blocks([r for r in runs if r.step == 0])
    assert isinstance(hint, Paragraph) and "run a sweep" in hint.text
    throughput, p99 = sweep_blocks(runs)
    assert isinstance(throughput, Chart) and isinstance(p99, Chart)
    assert {"llama throughput", "vllm throughput", "llama goodput"} <= set(legend(throughput))
    assert {"llama TTFT p99", "vllm TTFT p99"} <= set(legend(p99))
