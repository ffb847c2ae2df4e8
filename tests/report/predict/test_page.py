"""The predict page: each engine's verdict and percentiles with intervals, the TTFT split
drawn as parts of one whole."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from html import unescape

import pytest

from kvroute.cache.capacity import resolve_gpu, resolve_model
from kvroute.predict.predict import Load, predict
from kvroute.predict.result import Prediction
from kvroute.predict.workload import parse_workload
from kvroute.report.page.html import Table, render_page
from kvroute.report.predict.page import prediction_page, stacked_bars

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def predictions() -> list[Prediction]:
    requests = parse_workload("fixed:isl=512,osl=64,n=50").requests()
    return [
        predict(
            requests,
            engine=engine,
            gpu=resolve_gpu("h100-80gb"),
            model=resolve_model("llama-3.1-8b"),
            load=Load(concurrency=4),
            num_samples=50,
        )
        for engine in ("vllm", "sglang")
    ]


def test_the_page_leads_with_each_engines_verdict_and_tables_its_percentiles(
    predictions: list[Prediction],
) -> None:
    page = prediction_page(predictions, NOW)
    assert page.subtitle == "vllm, sglang · llama-3.1-8b · closed loop, 4 clients"
    verdicts = [b.title for b in page.lead if hasattr(b, "title")]
    assert verdicts == ["vllm: keeps up", "sglang: keeps up"]
    (table,) = page.sections[0].blocks
    assert isinstance(table, Table)
    vllm_ttft = next(r for r in table.rows if r[0] == "vllm" and r[1] == "TTFT")
    p50 = predictions[0].ttft.p50
    assert vllm_ttft[2] == (
        f"{p50.value * 1e3:,.1f} ms [{p50.ci95.low * 1e3:,.1f}–{p50.ci95.high * 1e3:,.1f}]"
    )
    html = unescape(render_page(page))
    for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        ET.fromstring(svg)


def test_no_prediction_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing to report"):
        prediction_page([], NOW)


def test_a_stacked_bar_is_as_long_as_its_parts_together_and_prints_the_total() -> None:
    svg = stacked_bars(
        ["a", "b"],
        [("queue", [0.010, 0.0]), ("prefill", [0.030, 0.020]), ("overhead", [-0.005, 0.020])],
        title="split",
        x_label="seconds",
    )
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert texts.count("40.0 ms") == 2  # both total 40 ms (a negative part counts as zero)
    bars = [
        (float(r.get("x", 0)), float(r.get("width", 0)), (r.findtext(f"{ns}title") or ""))
        for r in root.iter(f"{ns}rect")
        if r.findtext(f"{ns}title")
    ]
    a = [b for b in bars if b[2].startswith("a ·")]
    assert [b[2] for b in a] == [
        "a · queue: 10.0 ms",
        "a · prefill: 30.0 ms",
        "a · overhead: 0.0 ms",
    ]
    assert a[1][0] == pytest.approx(a[0][0] + a[0][1], abs=0.2)  # parts follow one another
    assert a[1][1] == pytest.approx(3 * a[0][1], abs=0.3)
