"""Exact overlap on constructed traces with known structure; token and hash forms agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute.analyze.prefix_index import lcp_tokens_bruteforce
from kvroute.analyze.result import AnalysisResult, Granularity, VerdictLevel
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.errors import EmptyTraceError, InputError
from kvroute.trace.readers import read_trace
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt
from kvroute.trace.writer import TraceWriter


def _tok(xs: np.ndarray | list[int]) -> Request:
    return Request(prompt=TokenPrompt(np.asarray(xs, dtype=np.uint32)))


def _analyze(reqs: list[Request], chunk_requests: int = 1024) -> AnalysisResult:
    opts = AnalyzeOptions(chunk_requests=chunk_requests)
    return analyze_requests(
        reqs, trace_path="t", trace_format="test", tokenizer_name=None, options=opts
    )


def test_system_prompt_plus_unique_questions() -> None:
    rng = np.random.default_rng(0)
    system = rng.integers(1000, 2000, size=200, dtype=np.uint32)  # 12.5 blocks of 16
    n, q = 50, 40
    reqs = [
        _tok(
            np.concatenate(
                [
                    system,
                    np.array([i], dtype=np.uint32),
                    rng.integers(3000, 9000, size=q - 1, dtype=np.uint32),
                ]
            )
        )
        for i in range(n)
    ]
    r = _analyze(reqs)
    total = n * (200 + q)
    assert r.overlap.prompt_tokens == total
    assert r.overlap.reusable_tokens == (n - 1) * 200
    assert r.overlap.block_reusable_tokens == (n - 1) * 192
    g = r.groups.top[0]
    assert (g.num_requests, g.start_tokens, g.prefix_tokens) == (n - 1, 0, 192)
    assert g.share_of_reuse == pytest.approx(1.0)  # 8 sub-block tokens credited to the same group
    assert r.verdict.level is VerdictLevel.RADIX_PAYS
    # Every prompt carries the system prompt and nothing more of another's.
    assert r.overlap.common_prefix_tokens == 200
    assert r.overlap.share_requests_with_reuse == 0.0


def test_requests_reusing_count_only_reuse_beyond_the_shared_template_head() -> None:
    """A chat template's head (BOS + role header) starts every prompt; a request reuses a
    prefix only when it shares more than that with an earlier one."""
    rng = np.random.default_rng(1)
    head = np.array([1, 7, 9], dtype=np.uint32)
    docs = [rng.integers(100, 5000, size=40, dtype=np.uint32) for _ in range(2)]
    prompts = []
    for i in range(40):
        question = rng.integers(5000, 9000, size=12, dtype=np.uint32)
        # From request 28 on, prompts quote one of two documents; 30..39 quote one again.
        body = [docs[i % 2], question] if i >= 28 else [np.array([10_000 + i]), question]
        prompts.append(np.concatenate([head, *body]))
    r = _analyze([_tok(p) for p in prompts])
    assert r.overlap.common_prefix_tokens == 3
    assert r.overlap.share_requests_with_reuse == pytest.approx(10 / 40)
    assert any("3 tokens" in reason and "25.0 %" in reason for reason in r.verdict.reasons)


def test_distinct_prompts_have_no_overlap_and_verdict_equivalent() -> None:
    reqs = [_tok(np.arange(i * 100 + 1, i * 100 + 90)) for i in range(20)]
    r = _analyze(reqs)
    assert r.overlap.reusable_tokens == 0
    assert r.verdict.level is VerdictLevel.EQUIVALENT
    assert r.groups.top == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), max_size=48), min_size=1, max_size=15))
def test_overlap_equals_bruteforce(prompts: list[list[int]]) -> None:
    arrays = [np.array(p, dtype=np.uint32) for p in prompts]
    r = _analyze([_tok(a) for a in arrays], chunk_requests=4)
    lcps = lcp_tokens_bruteforce(arrays)
    assert r.overlap.reusable_tokens == sum(lcps)
    common = 0
    if len(arrays) > 1:  # the prefix of prompt 0 that every other prompt starts with
        first = arrays[0]
        common = min(lcp_tokens_bruteforce([first, a])[1] for a in arrays[1:])
    assert r.overlap.common_prefix_tokens == common
    assert r.overlap.share_requests_with_reuse == pytest.approx(
        sum(x > common for x in lcps) / len(lcps)
    )
    assert r.overlap.block_reusable_tokens == sum(e // 16 * 16 for e in lcps)
    # Group savings decompose the total reuse exactly.
    assert sum(g.tokens_saved for g in r.groups.top) <= r.overlap.reusable_tokens
    # An infinite ideal LRU catches exactly the block-level reuse.
    assert r.reuse.infinite_hit_ratio * r.overlap.prompt_tokens == pytest.approx(
        r.overlap.block_reusable_tokens
    )


def test_token_and_hash_forms_agree(tmp_path: Path) -> None:
    """The same prompts as tokens and as a kvroute hash-only trace give the same block-level reuse."""
    rng = np.random.default_rng(3)
    stems = [rng.integers(0, 100, size=160, dtype=np.uint32) for _ in range(3)]
    reqs = []
    for i in range(60):
        stem = stems[i % 3][: 16 * int(rng.integers(1, 11))]
        tail = rng.integers(0, 100, size=16 * int(rng.integers(0, 4)), dtype=np.uint32)
        reqs.append(
            Request(
                prompt=TokenPrompt(np.concatenate([stem, tail])),
                arrival_s=float(i),
                session_id=f"s{i % 5}",
            )
        )
    by_tokens = _analyze(reqs)
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, block_size_tokens=16) as w:
        for req in reqs:
            w.append(req)
    back = list(read_trace(path))
    assert all(isinstance(r.prompt, BlockPrompt) for r in back)
    by_hashes = _analyze(back)
    assert by_hashes.overlap.granularity is Granularity.BLOCK
    assert by_hashes.overlap.reusable_tokens == by_tokens.overlap.block_reusable_tokens
    assert by_hashes.sessions.num_sessions == by_tokens.sessions.num_sessions == 5
    assert by_hashes.reuse.hit_ratio == by_tokens.reuse.hit_ratio


def test_sessions_continuation_with_outputs() -> None:
    base = list(range(100, 140))
    out1 = list(range(500, 520))
    t1 = Request(
        prompt=TokenPrompt(np.array(base, dtype=np.uint32)),
        session_id="a",
        output_token_ids=np.array(out1, dtype=np.uint32),
    )
    follow = base + out1 + list(range(900, 920))
    t2 = Request(prompt=TokenPrompt(np.array(follow, dtype=np.uint32)), session_id="a")
    other = Request(
        prompt=TokenPrompt(np.array(list(range(2000, 2050)), dtype=np.uint32)), session_id="b"
    )
    r = _analyze([t1, other, t2])
    s = r.sessions
    assert (s.num_sessions, s.num_followup_turns) == (2, 1)
    assert s.continuation_share.mean == pytest.approx(60 / 80)
    assert s.share_extends_previous_with_output == 1.0


def test_concurrency_from_end_times() -> None:
    reqs = [
        Request(
            prompt=TokenPrompt(np.array([i], dtype=np.uint32)),
            arrival_s=float(i),
            end_s=float(i) + 2.5,
        )
        for i in range(10)
    ]
    c = _analyze(reqs).shape.concurrency
    assert c is not None and c.max == 3


def test_mixed_forms_rejected_and_empty() -> None:
    mixed = [
        _tok([1, 2]),
        Request(prompt=BlockPrompt(np.array([1], dtype=np.uint64), 16, 10), source_line=7),
    ]
    with pytest.raises(InputError) as err:
        _analyze(mixed)
    assert err.value.line == 7
    with pytest.raises(EmptyTraceError):
        _analyze([])
