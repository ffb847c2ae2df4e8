"""Prompt drift: a system prompt that changes version mid-trace is found, with about
the right time, the kept and changed parts, the shares; stable prefixes, unshared
traffic and long single sessions report nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import pytest
from rich.console import Console

from kvroute.analyze.drift import DriftTracker
from kvroute.analyze.result import AnalysisResult
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.report.analyze.console import render_console
from kvroute.report.analyze.page import analysis_page
from kvroute.report.page.html import render_page
from kvroute.trace.readers import read_trace
from kvroute.trace.records import Request, TokenPrompt
from kvroute.trace.writer import TraceWriter

N, SWITCH = 1000, 500


def _trace(change: bool, seed: int = 0) -> list[Request]:
    """70 % app traffic with an 800-token system prompt (v2 from request SWITCH on when
    ``change``: its first 512 tokens kept, the rest rewritten to 832 tokens), 20 % a
    second tenant with a stable 320-token prompt, 10 % unrelated prompts."""
    rng = np.random.default_rng(seed)
    v1 = rng.integers(1000, 2000, size=800, dtype=np.uint32)
    v2 = np.concatenate([v1[:512], rng.integers(2000, 3000, size=320, dtype=np.uint32)])
    other = rng.integers(3000, 4000, size=320, dtype=np.uint32)
    out = []
    for i in range(N):
        u = rng.random()
        question = rng.integers(5000, 60000, size=int(rng.integers(20, 60)), dtype=np.uint32)
        if u < 0.7:
            head = v2 if change and i >= SWITCH else v1
        elif u < 0.9:
            head = other
        else:
            head = np.empty(0, dtype=np.uint32)
        out.append(
            Request(
                prompt=TokenPrompt(np.concatenate([head, question])),
                arrival_s=1_764_500_000.0 + 2.0 * i,
                session_id=f"user{i % 40}",
            )
        )
    return out


def _analyze(reqs: list[Request], window: int = 100) -> AnalysisResult:
    opts = AnalyzeOptions(drift_window_requests=window, chunk_requests=256)
    return analyze_requests(
        reqs,
        trace_path="t",
        trace_format="test",
        tokenizer_name=None,
        options=opts,
        decode=lambda ids: " ".join(map(str, ids[:3])),
    )


def test_a_changed_system_prompt_is_found_with_time_and_cost() -> None:
    r = _analyze(_trace(change=True))
    assert len(r.drift.changes) == 1, r.drift.changes
    c = r.drift.changes[0]
    assert SWITCH <= c.at_request < SWITCH + 10  # the first v2 request
    assert c.at_offset_s == pytest.approx(2.0 * c.at_request)
    assert (c.old_prefix_tokens, c.new_prefix_tokens) == (800, 832)
    assert (c.common_prefix_tokens, c.changed_tokens) == (512, 288)
    assert 0.6 < c.share_before < 0.8 and 0.6 < c.share_after < 0.8  # 70 % app traffic
    assert c.num_requests_old > 250 and c.num_requests_new > 250
    assert c.preview_old is not None and c.preview_new is not None
    assert c.preview_old != c.preview_new  # the first rewritten block, as text
    data = orjson.loads(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY))
    assert data["drift"]["changes"][0]["changed_tokens"] == 288
    assert data["drift"]["num_windows"] == 10


def test_the_hash_only_form_finds_the_same_change(tmp_path: Path) -> None:
    reqs = _trace(change=True, seed=1)
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, block_size_tokens=16) as w:
        for req in reqs:
            w.append(req)
    by_tokens = _analyze(reqs).drift.changes
    by_hashes = _analyze(list(read_trace(path))).drift.changes
    assert len(by_hashes) == len(by_tokens) == 1
    a, b = by_tokens[0], by_hashes[0]
    assert (a.at_request, a.common_prefix_tokens) == (b.at_request, b.common_prefix_tokens)
    assert b.changed_tokens == 288 and b.preview_old is None  # no text in a hash-only trace


def test_no_change_reports_nothing() -> None:
    r = _analyze(_trace(change=False))
    assert r.drift.changes == [] and r.drift.num_windows == 10
    assert r.overlap.hit_ratio > 0.5  # there is plenty of shared prefix, just no new version


def test_long_sessions_taking_turns_are_not_versions() -> None:
    """One session at a time, 150 growing turns each over a common system prompt: each
    session's history is frequent in its windows, then gone, but it is one session's
    own prefix, not a shared one."""
    rng = np.random.default_rng(5)
    system = rng.integers(1000, 2000, size=320, dtype=np.uint32)
    reqs = []
    for s in range(4):
        history = system
        for _ in range(150):
            turn = rng.integers(5000, 60000, size=32, dtype=np.uint32)
            history = np.concatenate([history, turn])
            reqs.append(Request(prompt=TokenPrompt(history[-4000:]), session_id=f"s{s}"))
    assert _analyze(reqs).drift.changes == []


def test_report_shows_the_change() -> None:
    r = _analyze(_trace(change=True))
    console = Console(width=120, record=True)
    render_console(r, console)
    text = console.export_text()
    assert "Prompt drift" in text and "800 → 832" in text and "288" in text
    page = render_page(analysis_page(r, datetime(2026, 11, 30, tzinfo=UTC)))
    assert "Prompt drift" in page and "changed version" in page and "800 → 832" in page
    quiet = render_page(analysis_page(_analyze(_trace(change=False)), datetime.now(UTC)))
    assert "No frequent shared prefix changed version" in quiet


def test_tracker_without_times() -> None:
    t = DriftTracker(16, window_requests=10, min_share=0.3)
    a, b = np.arange(1, 6, dtype=np.uint64), np.arange(11, 16, dtype=np.uint64)
    for i in range(40):
        keys = a if i < 20 else b
        t.add(np.concatenate([keys, np.array([100 + i], dtype=np.uint64)]), 96, 0, None, None)
    [c] = t.finish().changes
    assert c.at_request == 20 and c.at_s is None and c.common_prefix_tokens == 0
    assert c.changed_tokens == 80
