"""The bench HTML report, comparison page and console summary, from hand-built results."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import UTC, datetime

from rich.console import Console

from kvroute.bench.results.compare import compare
from kvroute.bench.results.metrics import Slo, stat, summarize
from kvroute.bench.results.record import RequestRecord
from kvroute.bench.results.result import (
    SCHEMA,
    BenchResult,
    EndpointInfo,
    LoadInfo,
    Run,
    WorkloadInfo,
)
from kvroute.report.bench_console import render_result
from kvroute.report.bench_page import bench_page, compare_page
from kvroute.report.html import render_page

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def run(name: str, step: int, rate: float, ttft: float, cached: int) -> Run:
    records = [
        RequestRecord(
            index=i,
            scheduled_s=i / rate,
            sent_s=i / rate,
            first_byte_s=i / rate + ttft / 2,
            first_token_s=i / rate + ttft + 0.01 * i,
            end_s=i / rate + ttft + 0.5,
            chunk_times_s=[i / rate + ttft + 0.01 * i + 0.05 * k for k in range(5)],
            completion_tokens=5,
            prompt_tokens=100,
            cached_tokens=cached if i % 2 else 0,
        )
        for i in range(20)
    ]
    summary = summarize(records, slo=Slo(ttft_s=0.3))
    return Run(
        EndpointInfo(name, "http://127.0.0.1:1", "llamacpp", "m", "cold", []),
        step,
        0,
        LoadInfo("open", f"rate={rate:g}/s", rate_per_s=rate),
        0.0,
        summary,
        records,
    )


def result(ttft: float) -> BenchResult:
    runs = [
        run(n, s, r, ttft * (1 + s), c)
        for n, c in (("llama", 90), ("vllm", 40))
        for s, r in enumerate((2.0, 4.0))
    ]
    info = WorkloadInfo(
        "rag", {"overlap": "0.6"}, 0, 20, "SmolLM2", stat([100.0]), stat([5.0]), 0, 0, 0.6
    )
    return BenchResult(SCHEMA, 0.0, "0.1.0", info, {}, "sequential", runs, 1.0)


def svgs(html: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", html, flags=re.S)


def test_bench_page_has_cdfs_sweep_and_cache_split() -> None:
    html = render_page(bench_page(result(0.2), NOW))
    for title in (
        "Time to first token (CDF)",
        "Throughput vs offered load",
        "TTFT p99 vs offered load",
        "TTFT by engine-reported cache hit (CDF)",
        "Inter-token latency (CDF)",
    ):
        assert title in html
    charts = svgs(html)
    assert len(charts) >= 7
    for svg in charts:
        ET.fromstring(svg)
    assert "llama · rate=2/s · hit (10 requests)" in html and "vllm · rate=4/s · miss (" in html


def test_compare_page_pairs_runs() -> None:
    a, b = result(0.2), result(0.4)
    pairs = compare(a, b)
    assert len(pairs) == 4
    ttft = next(d for d in pairs[0].diffs if d.name == "TTFT p50")
    assert ttft.delta is not None and ttft.delta > 0.15 and ttft.better == "a"
    html = render_page(compare_page(a, b, pairs, NOW))
    assert "A llama vs B llama · rate=2/s" in html
    for svg in svgs(html):
        ET.fromstring(svg)


def interrupted(r: BenchResult) -> BenchResult:
    """``r`` as Ctrl-C leaves it: its last run cut short."""
    return replace(r, runs=[*r.runs[:-1], replace(r.runs[-1], interrupted=True)], interrupted=True)


def test_an_interrupted_result_is_marked_at_the_top_of_its_page() -> None:
    html = render_page(bench_page(interrupted(result(0.2)), NOW))
    assert re.search(r"<title>[^<]*interrupted", html), html[:500]
    body = html[html.index("<body") :]
    mark = body.index("Interrupted by Ctrl-C")
    assert mark < body.index("<table") and mark < body.index("<svg")
    assert "3 finished runs and 1 cut short" in body
    assert body.count("rate=4/s (interrupted)") == 2  # the cut run, in both summary tables
    assert "nterrupted" not in render_page(bench_page(result(0.2), NOW))


def test_compare_page_says_which_side_was_interrupted() -> None:
    a, b = result(0.2), interrupted(result(0.4))
    html = render_page(compare_page(a, b, compare(a, b), NOW))
    assert "B: Interrupted by Ctrl-C" in html and "A: Interrupted" not in html


def test_console_summary_of_an_interrupted_result_says_so_first() -> None:
    def summary(r: BenchResult) -> str:
        console = Console(file=io.StringIO(), width=200, record=True)
        render_result(r, console)
        return console.export_text()

    text = summary(interrupted(result(0.2)))
    assert text.startswith("INTERRUPTED BY CTRL-C"), text
    assert "3 finished runs and 1 cut short" in text
    assert "rate=4/s (interrupted)" in text
    assert "nterrupt" not in summary(result(0.2)).lower()


def test_the_page_leads_with_its_conclusion_and_splits_the_summary_to_fit() -> None:
    res = result(0.2)
    faster = replace(res.runs[2], summary=replace(res.runs[2].summary, ttft_s=stat([0.1])))
    res = replace(res, runs=[res.runs[0], res.runs[1], faster, res.runs[3]])
    body = render_page(bench_page(res, NOW))
    assert "Lowest TTFT p50 at each load" in body
    # 0.1 s against 0.295 s; the value's space does not break (a browser kept "%" alone)
    assert "rate=2/s: vllm vs llama TTFT p50 -66\xa0%" in body
    # Two summary tables of at most 11 columns each, not one that scrolls sideways.
    tables = re.findall(r"<table>.*?</table>", body, flags=re.S)
    heads = [t.count('scope="col"') for t in tables[:2]]
    assert all(n <= 11 for n in heads) and "JSON valid" not in tables[1]  # nothing structured
    assert "did not run alike" not in body  # same model, same cache state
    cold_warm = replace(res.runs[2], endpoint=replace(res.runs[2].endpoint, cache_state="warm"))
    body = render_page(bench_page(replace(res, runs=[res.runs[0], cold_warm]), NOW))
    assert "The endpoints did not run alike" in body and "llama cold, vllm warm" in body


def test_endpoints_with_different_threads_get_a_caveat_on_the_page_and_in_the_terminal() -> None:
    res = result(0.2)

    def computed(r: Run, threads: int | None, cpus: list[int] | None) -> Run:
        return replace(r, endpoint=replace(r.endpoint, threads=threads, cpus=cpus))

    unlike = replace(
        res,
        runs=[
            computed(r, 1, [0]) if r.endpoint.name == "llama" else computed(r, 2, [0, 1])
            for r in res.runs
        ],
    )
    body = render_page(bench_page(unlike, NOW))
    assert "The endpoints did not run alike" in body
    assert "llama 1 thread on CPU\xa00, vllm 2 threads on CPUs\xa00-1" in body  # never split
    console = Console(file=io.StringIO(), width=300, record=True)
    render_result(unlike, console)
    assert (
        "caveat: the endpoints did not run alike. Compute: llama 1 thread on CPU 0, vllm 2 "
        "threads on CPUs 0-1" in console.export_text()
    )
    alike = replace(res, runs=[computed(r, 1, None) for r in res.runs])
    assert "did not run alike" not in render_page(bench_page(alike, NOW))
    half = replace(
        res, runs=[computed(r, 1, None) if r.endpoint.name == "llama" else r for r in res.runs]
    )
    assert "vllm not recorded (add threads=N" in render_page(bench_page(half, NOW))


def test_a_narrow_terminal_keeps_the_load_and_names_the_columns_left_out() -> None:
    def text(width: int, wide: bool) -> str:
        console = Console(file=io.StringIO(), width=width, record=True)
        render_result(result(0.2), console, wide=wide)
        return console.export_text()

    narrow = text(70, wide=False)
    rows = [line for line in narrow.splitlines() if line.startswith(("llama ", "vllm "))]
    assert len(rows) == 4 and all("rate=" in r for r in rows)  # one line a run, load shown
    assert {r.split()[1] for r in rows} == {"rate=2/s", "rate=4/s"}
    assert "left out to fit 70 columns:" in narrow and "--wide shows them" in narrow
    wide = text(70, wide=True)
    rows = [line for line in wide.splitlines() if line.startswith(("llama ", "vllm "))]
    assert len(rows) == 4 and max(len(r) for r in rows) > 70  # every column, whole
    assert "left out" not in wide


def test_a_difference_of_float_noise_reads_as_zero() -> None:
    from kvroute.bench.results.compare import Diff
    from kvroute.report.bench_rows import diff_cells

    d = Diff("TPOT p50", "s", 0.05, 0.05, 0.0, 0.0, -5.55e-17, 5.55e-17, True, None)
    cells = diff_cells(d)
    assert cells[5] == "[+0 s, +0 s]", cells


def test_compare_says_when_a_and_b_ran_with_different_threads() -> None:
    a, b = result(0.2), result(0.3)
    b = replace(b, runs=[replace(r, endpoint=replace(r.endpoint, threads=2)) for r in b.runs])
    a = replace(a, runs=[replace(r, endpoint=replace(r.endpoint, threads=1)) for r in a.runs])
    body = render_page(compare_page(a, b, compare(a, b), NOW))
    assert "A and B did not run alike" in body and "A llama 1 thread, B llama 2 threads" in body
    same = render_page(compare_page(a, a, compare(a, a), NOW))
    assert "did not run alike" not in same
