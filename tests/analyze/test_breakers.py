"""Cache breakers: each planted kind found and costed, healthy traffic left alone."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from kvroute.analyze.breaker_cost import BreakersResult, ideal_hit_ratio, measure_breakers
from kvroute.analyze.breaker_kinds import BreakerKind, classify_values
from kvroute.analyze.breakers import find_candidates
from kvroute.trace.planted import PLANTED_KINDS, as_requests, planted_logs, with_tools_template
from kvroute.trace.records import ChatPrompt, Prompt, Request, TextPrompt
from kvroute.trace.synthetic import sample_log, sample_text
from kvroute.trace.tokenize import encode_prompt
from kvroute.trace.tokenizer import ChatTokenizer, default_model_path, load_tokenizer


@pytest.fixture(scope="module")
def smol() -> ChatTokenizer:
    path = default_model_path()
    assert path.is_file(), f"{path} missing: run scripts/install-engines model"
    return load_tokenizer(path)


@pytest.fixture(scope="module")
def tool_tok(smol: ChatTokenizer) -> ChatTokenizer:
    return with_tools_template(smol)


def _measure(reqs: list[Request], tok: ChatTokenizer, **kw: Any) -> BreakersResult:
    return measure_breakers(reqs, None, partial(encode_prompt, tok), **kw)


def _ideal(records: list[dict[str, Any]], tok: ChatTokenizer) -> float:
    return ideal_hit_ratio(
        [encode_prompt(tok, _text_prompt(r.prompt)) for r in as_requests(records)]
    )


def _text_prompt(p: Prompt) -> ChatPrompt | TextPrompt:
    assert isinstance(p, ChatPrompt | TextPrompt)
    return p


@pytest.mark.parametrize("kind", PLANTED_KINDS)
def test_planted_kind_is_found_and_its_fix_predicted(kind: str, tool_tok: ChatTokenizer) -> None:
    logs = planted_logs(kind, 120, seed=3)
    res = _measure(as_requests(logs.broken), tool_tok)
    assert [f.kind.value for f in res.findings] == [kind]
    (f,) = res.findings
    field = "tools" if kind.startswith("tool_") else "messages[0].content (system)"
    assert f.field == field
    assert f.num_variants >= 2 and f.num_requests >= 4
    assert f.ideal_hit_after > f.ideal_hit_before + 0.005
    assert f.examples and f.context_after is not None
    assert f.token_position > 0
    # The replayed fix is within one point of the trace fixed by hand.
    assert abs(f.ideal_hit_after - _ideal(logs.fixed, tool_tok)) < 0.01


def test_timestamp_finding_names_position_and_text(tool_tok: ChatTokenizer) -> None:
    reqs = as_requests(planted_logs("timestamp", 60, seed=1).broken)
    (f,) = _measure(reqs, tool_tok).findings
    assert f.char_offset == len("Current time: ")
    assert f.context_before == "Current time: "
    assert f.context_after is not None and f.context_after.startswith("\nYou are the assistant")
    assert f.examples is not None and f.examples[0].startswith("Current time: 2025-")
    # Inside the timestamp: two requests a few seconds apart share its leading digits.
    head = tool_tok.encode("<|im_start|>system\nCurrent time: ").shape[0]
    stamp = tool_tok.encode("2025-11-30T12:00:03Z.").shape[0]
    assert head <= f.token_position < head + stamp
    assert "timestamp" in f.fix


@pytest.mark.parametrize("seed", [0, 1])
def test_healthy_logs_have_no_findings(seed: int, tool_tok: ChatTokenizer) -> None:
    assert (
        _measure(as_requests(planted_logs("none", 150, seed=seed).broken), tool_tok).findings == []
    )
    sample = as_requests(list(sample_log(400, seed=seed)))
    assert _measure(sample, tool_tok).findings == []


def test_no_text_keeps_prompt_text_out(tool_tok: ChatTokenizer) -> None:
    reqs = as_requests(planted_logs("uuid", 60, seed=2).broken)
    (f,) = _measure(reqs, tool_tok, with_text=False).findings
    assert f.examples is None and f.context_before is None and f.context_after is None


def test_tools_a_template_drops_cost_nothing(smol: ChatTokenizer) -> None:
    """SmolLM2's template does not render tools: their order cannot break its cache, so
    the candidate is found but not reported."""
    reqs = as_requests(planted_logs("tool_order", 80, seed=0).broken)
    res = _measure(reqs, smol)
    assert res.num_candidates >= 1
    assert res.findings == []


def test_varying_question_after_shared_prefix_is_not_a_breaker() -> None:
    shared = sample_text(__import__("numpy").random.default_rng(0), 80)
    prompts: list[Prompt] = [
        ChatPrompt([{"role": "user", "content": f"{shared}\n\nQuestion: what about {name}?"}])
        for name in ["cats", "dogs", "birds", "fish", "cows", "ants"]
    ]
    assert find_candidates(prompts) == []


def test_per_user_field_from_user_ids() -> None:
    rest = " Follow the policy below. " + "Be brief and exact. " * 12
    names = ["Alice", "Bruno", "Chen"]
    prompts: list[Prompt] = []
    users: list[str | None] = []
    for i in range(9):
        prompts.append(
            ChatPrompt(
                [
                    {"role": "system", "content": f"You help {names[i % 3]}.{rest}"},
                    {"role": "user", "content": f"question {i}"},
                ]
            )
        )
        users.append(f"u{i % 3}")
    (c,) = find_candidates(prompts, users)
    assert c.kind is BreakerKind.PER_USER_FIELD
    assert c.field.path == "messages[0].content (system)"
    assert sorted(c.request_indices) == list(range(9))


def test_date_of_which_only_the_day_varies() -> None:
    spans = [[("Today is December ", f"{d},", " 2026.")] for d in (1, 2, 3)]
    assert (
        classify_values(spans, in_tools=False, per_user=None, num_requests=30) is BreakerKind.DATE
    )
    names = [[("You help ", n, ".")] for n in ("Alice", "Bruno")]
    assert (
        classify_values(names, in_tools=False, per_user=None, num_requests=10)
        is BreakerKind.PER_USER_FIELD
    )
    assert (
        classify_values(names, in_tools=False, per_user=None, num_requests=2)
        is BreakerKind.VARYING_FIELD
    )
