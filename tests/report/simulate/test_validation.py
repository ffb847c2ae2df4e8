"""The --validate report: predicted against measured, and the requests that missed, largest first."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape

import numpy as np
from rich.console import Console

from kvroute.cache.registry import EngineSettings
from kvroute.report.page.html import Page, Table, render_page
from kvroute.report.simulate.validation import (
    largest_misses,
    render_validation,
    run_line,
    validation_section,
)
from kvroute.validate.compare import compare
from kvroute.validate.predict import predict
from kvroute.validate.result import (
    EngineSetup,
    ResetOutcome,
    RunInfo,
    RunShape,
    Served,
    ValidationResult,
)
from kvroute.validate.settings import with_given


def hand_made_run() -> ValidationResult:
    """Three identical 10-token prompts on vLLM with 4-token blocks: the model predicts 0,
    8 and 8 cached tokens; the engine said 0, 4 and 8 (request 1 missed by one block)."""
    ids = [np.arange(10, dtype=np.uint32)] * 3
    served = [
        Served(0.0, 1.0, 0.0, None, 10, 0, 2, None, None),
        Served(1.1, 2.0, 1.1, None, 10, 4, 2, None, None),
        Served(2.1, 3.0, 2.1, None, 10, 8, 2, None, None),
    ]
    settings = with_given(EngineSettings(), "vllm", {"block_size_tokens": 4})
    setup = EngineSetup("vllm", settings, 400, {"block_size": 4, "num_blocks": 100}, {})
    replay = predict(ids, served, setup, lead_s=0.02)
    return compare(
        ids,
        served,
        replay,
        setup=setup,
        counters=None,
        endpoints=["completions"] * 3,
        run=RunInfo(
            "vllm", "http://127.0.0.1:8000", "m", ResetOutcome.RESET, RunShape.CLOSED_LOOP, 1
        ),
    )


def test_the_one_miss_is_listed_and_the_exact_ones_are_not() -> None:
    v = hand_made_run()
    assert [
        (r.index, r.predicted_cached_tokens, r.measured_cached_tokens) for r in largest_misses(v)
    ] == [(1, 8, 4)]


def test_the_terminal_summary_gives_both_hit_ratios_and_the_error() -> None:
    console = Console(record=True, width=160)
    render_validation(hand_made_run(), console)
    out = console.export_text()
    assert (
        "vllm at http://127.0.0.1:8000 (m) · 3 requests closed loop of 1 · cache reset first" in out
    )
    # predicted 16 of 30 tokens, measured 12 of 30
    assert re.search(r"hit ratio\s+53\.33 %\s+40\.00 %\s+\+13\.33 pp", out), out
    assert re.search(r"cached tokens\s+16\s+12\s+\+4", out), out
    assert re.search(r"^\s*1\s+completions\s+10\s+8\s+4\s*$", out, re.M), out


def test_the_page_section_names_the_run_and_tables_the_miss() -> None:
    v = hand_made_run()
    section = validation_section(v)
    assert section.title == "Validation against the real engine"
    page = Page(title="t", sections=[section], generated_at=datetime(2026, 1, 1, tzinfo=UTC))
    html = unescape(render_page(page)).replace("\xa0", " ")
    assert run_line(v) in html
    rows = [list(row) for b in section.blocks if isinstance(b, Table) for row in b.rows]
    assert ["1", "completions", "10", "8", "4"] in rows, rows
