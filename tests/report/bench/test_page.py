"""The bench HTML report and comparison page, from hand-built results."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import replace

from rich.console import Console

from kvroute.bench.compare import compare
from kvroute.bench.metrics import stat
from kvroute.bench.result import Run
from kvroute.report.bench.console import render_result
from kvroute.report.bench.page import bench_page, compare_page
from kvroute.report.page.html import render_page

from .results import NOW, interrupted, result


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


def test_compare_says_when_a_and_b_ran_with_different_threads() -> None:
    a, b = result(0.2), result(0.3)
    b = replace(b, runs=[replace(r, endpoint=replace(r.endpoint, threads=2)) for r in b.runs])
    a = replace(a, runs=[replace(r, endpoint=replace(r.endpoint, threads=1)) for r in a.runs])
    body = render_page(compare_page(a, b, compare(a, b), NOW))
    assert "A and B did not run alike" in body and "A llama 1 thread, B llama 2 threads" in body
    same = render_page(compare_page(a, a, compare(a, a), NOW))
    assert "did not run alike" not in same
