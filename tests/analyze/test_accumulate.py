"""Hash-only traces (a gateway capture): a repeated prompt's partial last block saves
its own tokens in the trace's own figure and nothing at block level, and every
whole-block figure is the one the gateway's live window shows for the same requests."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from rich.console import Console

from kvroute.analyze.result import AnalysisResult, Granularity
from kvroute.analyze.run import analyze_requests
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.report import fmt
from kvroute.report.analyze.console import render_console
from kvroute.report.analyze.page import analysis_page
from kvroute.report.page.html import render_page
from kvroute.trace.readers import read_trace
from kvroute.trace.records import Request, TokenPrompt
from kvroute.trace.writer import TraceWriter, prompt_block_hashes

BLOCK = 16


def _chat_session() -> list[np.ndarray]:
    """Twelve chat-like prompts, none a whole number of blocks: a 37-token system
    prompt, questions, follow-up turns, and retries (the same prompt sent again, so its
    partial last block's hash repeats too), two of them shorter than a block."""
    rng = np.random.default_rng(7)

    def words(n: int) -> np.ndarray:
        return rng.integers(100, 50_000, size=n, dtype=np.uint32)

    system = words(37)
    a, b, c = (np.concatenate([system, words(n)]) for n in (9, 16, 22))
    a2 = np.concatenate([a, words(20)])  # a's answer and the next question
    other, tiny = words(30), words(10)
    return [a, a, b, a2, a2, c, b, other, other, np.concatenate([c, words(11)]), tiny, tiny]


def _analyze(reqs: list[Request]) -> AnalysisResult:
    return analyze_requests(reqs, trace_path="t", trace_format="kvroute", tokenizer_name=None)


def _gateway_overlap(prompts: list[np.ndarray]) -> float:
    """The live window's overlap over the same requests, fed as capture records."""
    traffic = TrafficShape(TrafficConfig(block_size_tokens=BLOCK))
    records = [
        {"input_len": p.shape[0], "hashes": prompt_block_hashes(p, BLOCK).tolist()} for p in prompts
    ]
    traffic.observe_records(records, 0.0)
    assert traffic.overlap is not None
    return traffic.overlap


def test_hash_only_trace_figures_agree_with_the_gateway(tmp_path: Path) -> None:
    prompts = _chat_session()
    reqs = [Request(prompt=TokenPrompt(p), arrival_s=float(i)) for i, p in enumerate(prompts)]
    path = tmp_path / "capture.jsonl"
    with TraceWriter(path, block_size_tokens=BLOCK) as w:
        for req in reqs:
            w.append(req)
    r = _analyze(list(read_trace(path)))
    by_tokens = _analyze(reqs)
    ov = r.overlap
    assert ov.granularity is Granularity.BLOCK

    gateway = _gateway_overlap(prompts)
    assert ov.block_reusable_tokens == by_tokens.overlap.block_reusable_tokens
    assert ov.block_hit_ratio == gateway
    assert r.reuse.infinite_hit_ratio == ov.block_hit_ratio  # the ideal LRU's limit
    # The trace's own figure adds the partial last blocks of whole repeats, no more.
    seen: set[bytes] = set()
    tails = 0
    for p in prompts:
        tails += p.shape[0] % BLOCK if p.tobytes() in seen else 0
        seen.add(p.tobytes())
    assert tails > 0
    assert ov.reusable_tokens == ov.block_reusable_tokens + tails
    assert ov.reusable_tokens <= by_tokens.overlap.reusable_tokens
    # Groups split exactly that reuse, over whole blocks: a repeated tail is credited
    # to its prompt's last whole block, or to the "< 1 block" group.
    assert sum(g.tokens_saved for g in r.groups.top) == ov.reusable_tokens
    longest = max(p.shape[0] // BLOCK * BLOCK for p in prompts)
    assert all(g.prefix_tokens % BLOCK == 0 and g.prefix_tokens <= longest for g in r.groups.top)
    assert any(g.sub_block for g in r.groups.top)  # the short prompt sent twice
    # The verdict names both figures, each with its own label.
    own, blocks = fmt.percent(ov.hit_ratio), fmt.percent(gateway)
    assert own != blocks and f"{own} of" in r.verdict.headline
    assert any("16-token blocks (vLLM-style" in x and blocks in x for x in r.verdict.reasons)

    console = Console(width=120, record=True)
    render_console(r, console)
    rows = re.findall(r"^prefix overlap \((.+?)\) +(\d+\.\d %)", console.export_text(), re.M)
    assert rows == [("blocks + repeats", own), ("16-token blocks", blocks)]
    page = render_page(analysis_page(r, datetime(2026, 12, 1, tzinfo=UTC)))
    assert f"prefix overlap (16-token blocks)</th><td>{blocks}" in page.replace("\n", "")
