"""Reuse per model, user and class, within a conversation vs across requests, on a
constructed trace whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.analyze.breakdown import MAX_GROUPS, breakdown
from kvroute.analyze.result import AnalysisResult
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.analyze.warmup import Warmup
from kvroute.trace.records import Request, TokenPrompt


def _req(ids: np.ndarray, session: str, user: str, model: str) -> Request:
    return Request(
        prompt=TokenPrompt(ids.astype(np.uint32)), session_id=session, user_id=user, model=model
    )


def _trace() -> list[Request]:
    """A 32-token system prompt; conversation s1 (u1, m1) has two turns, the second
    extending the first; conversation s2 (u2, m2) shares only the system prompt."""
    sys_ = np.arange(1, 33)
    a, b, c = np.arange(100, 116), np.arange(200, 216), np.arange(300, 316)
    return [
        _req(np.concatenate([sys_, a]), "s1", "u1", "m1"),  # 48 tokens, nothing reused
        _req(np.concatenate([sys_, a, b]), "s1", "u1", "m1"),  # 64: 48 from its own turn
        _req(np.concatenate([sys_, c]), "s2", "u2", "m2"),  # 48: 32 from another conversation
    ]


def _analyze(**kw: object) -> AnalysisResult:
    return analyze_requests(
        _trace(),
        trace_path="t",
        trace_format="test",
        tokenizer_name=None,
        labels={"class": ["chat", "agent", "chat"]},
        options=AnalyzeOptions(**kw),  # type: ignore[arg-type]
    )


def test_within_and_across() -> None:
    b = _analyze().breakdown
    assert b is not None
    assert (b.prompt_tokens, b.within_conversation_tokens, b.across_requests_tokens) == (
        160,
        48,
        32,
    )
    assert b.within_conversation_share == pytest.approx(48 / 160)
    assert b.across_requests_share == pytest.approx(32 / 160)


def test_per_model_user_and_class() -> None:
    b = _analyze().breakdown
    assert b is not None
    by = {d.dimension: {g.key: g for g in d.groups} for d in b.by}
    assert set(by) == {"model", "user", "class"}
    m1, m2 = by["model"]["m1"], by["model"]["m2"]
    assert (m1.num_requests, m1.prompt_tokens, m1.reusable_tokens) == (2, 112, 48)
    assert (m2.num_requests, m2.prompt_tokens, m2.reusable_tokens) == (1, 48, 32)
    assert m1.within_conversation_tokens == 48 and m2.within_conversation_tokens == 0
    assert m1.hit_ratio == pytest.approx(48 / 112) and m1.share_of_prompt_tokens == pytest.approx(
        112 / 160
    )
    assert by["user"]["u2"].reusable_tokens == 32
    assert by["class"]["chat"].reusable_tokens == 32 and by["class"]["agent"].reusable_tokens == 48
    # the groups add up to the headline
    assert (
        sum(g.reusable_tokens for g in by["model"].values()) == _analyze().overlap.reusable_tokens
    )


def test_warmup_applies_to_the_breakdown() -> None:
    b = _analyze(warmup=Warmup(share_requests=0.34)).breakdown  # the first request
    assert b is not None and b.prompt_tokens == 112 and b.within_conversation_tokens == 48


def test_unlabelled_dimension_left_out_and_many_groups_folded() -> None:
    n = MAX_GROUPS + 5
    res = breakdown(
        [10] * n, [5] * n, [0] * n, {"user": [f"u{i}" for i in range(n)], "model": [None] * n}
    )
    (users,) = res.by
    assert users.dimension == "user" and users.num_groups == n
    assert len(users.groups) == MAX_GROUPS + 1 and users.groups[-1].key == "(5 others)"
    assert users.groups[-1].num_requests == 5 and users.groups[-1].prompt_tokens == 50
