"""Every workload: deterministic, real token lengths, and the overlap it was built with
as ``kvroute analyze`` measures it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import orjson
import pytest

from kvroute.bench.validate import check_answer
from kvroute.bench.workloads.base import PROMPT_TOKENS_TOLERANCE, Api, StructuredKind
from kvroute.bench.workloads.export import analyze_workload, log_records
from kvroute.bench.workloads.mix import parse_weights
from kvroute.bench.workloads.registry import (
    generate,
    make_workload,
    workload_params,
    workload_registry,
)
from kvroute.bench.workloads.schemas import example_of, make_schema, schema_depth
from kvroute.bench.workloads.text import TextSource
from kvroute.errors import UsageError
from kvroute.trace.readers import read_trace
from kvroute.trace.synthetic import sample_log
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tok() -> ChatTokenizer:
    return load_tokenizer()


def overlap(tok: ChatTokenizer, name: str, n: int = 120, **params: str) -> float:
    return analyze_workload(generate(name, n, tok, seed=3, params=params), tok).overlap.hit_ratio


GENERATED = ["qa", "rag", "multiturn", "agent", "json", "code", "mix"]


@pytest.mark.parametrize("name", GENERATED)
def test_deterministic_exact_count_and_real_token_lengths(tok: ChatTokenizer, name: str) -> None:
    a = generate(name, 40, tok, seed=11)
    b = generate(name, 40, tok, seed=11)
    assert len(a) == 40 and [r.index for r in a] == list(range(40))
    assert [orjson.dumps(dict(r.body)) for r in a] == [orjson.dumps(dict(r.body)) for r in b]
    assert [orjson.dumps(dict(r.body)) for r in a] != [
        orjson.dumps(dict(r.body)) for r in generate(name, 40, tok, seed=12)
    ]
    for r in a[:8]:
        assert r.api is Api.CHAT
        assert r.prompt_tokens == tok.encode_chat(r.body["messages"], r.body.get("tools")).shape[0]
        assert r.depends_on is None or r.depends_on < r.index


@pytest.mark.parametrize(("target", "prompt_tokens"), [(0.3, 600), (0.6, 600), (0.9, 1600)])
def test_rag_overlap_is_the_target(tok: ChatTokenizer, target: float, prompt_tokens: int) -> None:
    # At 0.9 each request keeps ~10 % of its prompt: 600 tokens leave too little for its
    # question and chunks (refused, see below), 1600 do.
    assert overlap(
        tok, "rag", overlap=str(target), prompt_tokens=str(prompt_tokens)
    ) == pytest.approx(target, abs=0.02)


@pytest.mark.parametrize("target", [0.2, 0.5])
def test_json_overlap_is_the_target(tok: ChatTokenizer, target: float) -> None:
    assert overlap(tok, "json", overlap=str(target)) == pytest.approx(target, abs=0.02)


def test_code_overlap_is_below_ten_percent(tok: ChatTokenizer) -> None:
    assert overlap(tok, "code") < 0.10


def test_qa_shares_only_the_template(tok: ChatTokenizer) -> None:
    reqs = generate("qa", 100, tok, seed=1)
    template = tok.encode_chat([{"role": "user", "content": "x"}]).shape[0] - 6
    assert overlap(tok, "qa", 100) < (template + 6) / np.mean([r.prompt_tokens for r in reqs])


def test_multiturn_resends_history_and_chains_turns(tok: ChatTokenizer) -> None:
    reqs = generate("multiturn", 60, tok, seed=2)
    by_index = {r.index: r for r in reqs}
    followups = [r for r in reqs if r.depends_on is not None]
    assert followups
    for r in followups:
        prev = by_index[r.depends_on]
        assert prev.session_id == r.session_id and r.think_s == 1.0
        msgs = r.body["messages"]
        assert msgs[: len(prev.body["messages"])] == prev.body["messages"]
        assert msgs[len(prev.body["messages"])]["role"] == "assistant"
    assert overlap(tok, "multiturn", 60) > 0.7


def test_agent_tools_history_and_sub_agents_share_the_parent_prefix(tok: ChatTokenizer) -> None:
    reqs = generate("agent", 80, tok, seed=4, params={"branch_prob": "0.5"})
    system = reqs[0].body["messages"][0]["content"]
    assert "Tools:" in system and "search_docs" in system
    assert all(r.body["messages"][0]["content"] == system for r in reqs)
    roles = {m["role"] for r in reqs for m in r.body["messages"]}
    assert {"system", "user", "assistant", "tool"} <= roles
    subs = [r for r in reqs if r.session_id and r.session_id.count(".") == 2]
    assert subs, "no sub-agent was forked"
    parent = next(p for p in reqs if p.index == subs[0].depends_on)
    sub_msgs = subs[0].body["messages"]
    assert len(sub_msgs) > len(parent.body["messages"])
    assert sub_msgs[: len(parent.body["messages"])] == parent.body["messages"]
    assert overlap(tok, "agent", 80) > 0.8


def test_json_schemas_vary_in_depth_and_examples_validate(tok: ChatTokenizer) -> None:
    reqs = generate(
        "json", 60, tok, seed=5, params={"min_depth": "1", "max_depth": "4", "tool_share": "0.5"}
    )
    depths = {schema_depth(dict(r.schema or {})) for r in reqs}
    assert depths == {1, 2, 3, 4}
    kinds = {r.structured for r in reqs}
    assert kinds == {StructuredKind.JSON_SCHEMA, StructuredKind.TOOL_ARGS}
    for r in reqs:
        if r.structured is StructuredKind.JSON_SCHEMA:
            assert r.body["response_format"]["json_schema"]["schema"] == r.schema
        else:
            assert r.body["tools"][0]["function"]["parameters"] == r.schema
    rng = np.random.default_rng(0)
    for depth in (1, 3):
        schema = make_schema(rng, depth)
        assert check_answer(orjson.dumps(example_of(schema, TextSource(rng))).decode(), schema) == (
            True,
            True,
        )


def test_mix_follows_its_weights_and_keeps_dependencies(tok: ChatTokenizer) -> None:
    reqs = generate("mix", 100, tok, seed=6, params={"weights": "rag=3,multiturn=1"})
    kinds = [r.workload for r in reqs]
    assert kinds.count("rag") == 75 and kinds.count("multiturn") == 25
    for r in reqs:
        if r.depends_on is not None:
            dep = reqs[r.depends_on]
            assert (
                dep.workload == "multiturn"
                and dep.session_id == r.session_id
                and dep.index < r.index
            )
    assert parse_weights("a, b=2") == {"a": 1.0, "b": 2.0}
    with pytest.raises(UsageError):
        generate("mix", 5, tok, params={"weights": "mix=1"})


def test_replay_keeps_prompts_and_scales_times(tok: ChatTokenizer, tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in sample_log(30, seed=1, rate_per_s=2.0))
    )
    trace = list(read_trace(path))
    reqs = generate("replay", 30, tok, params={"path": str(path), "speedup": "4"})
    assert len(reqs) == 30
    assert reqs[0].body["messages"] == trace[0].prompt.messages  # type: ignore[union-attr]
    t0 = trace[0].arrival_s or 0.0
    assert reqs[-1].arrival_s == pytest.approx(((trace[-1].arrival_s or 0.0) - t0) / 4)
    assert all(r.max_tokens == t.output_len for r, t in zip(reqs, trace, strict=True))


def test_synth_matches_an_analyzed_shape_without_its_text(
    tok: ChatTokenizer, tmp_path: Path
) -> None:
    original = generate("rag", 150, tok, seed=8, params={"overlap": "0.7", "prompt_tokens": "500"})
    result = analyze_workload(original, tok)
    path = tmp_path / "a.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY))
    synth = generate("synth", 150, tok, seed=9, params={"analysis": str(path)})
    again = analyze_workload(synth, tok)
    assert again.overlap.hit_ratio == pytest.approx(result.overlap.hit_ratio, abs=0.06)
    assert np.median([r.prompt_tokens for r in synth]) == pytest.approx(
        np.median([r.prompt_tokens for r in original]), rel=0.15
    )
    original_words = set(
        " ".join(m["content"] for r in original for m in r.body["messages"]).split()
    )
    assert all(r.api is Api.COMPLETIONS for r in synth)
    synth_words = set(" ".join(r.body["prompt"] for r in synth).split())
    assert len(synth_words & original_words) < len(
        synth_words
    )  # drawn from word lists, no copied text
    assert not any(
        m["content"][:80] in r.body["prompt"]
        for o in original[:5]
        for m in o.body["messages"]
        for r in synth[:5]
    )


def test_generated_log_is_read_by_analyze(tok: ChatTokenizer, tmp_path: Path) -> None:
    reqs = generate("rag", 20, tok, seed=1)
    path = tmp_path / "rag.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in log_records(reqs, model="m")))
    trace = list(read_trace(path))
    assert len(trace) == 20 and trace[0].prompt.messages == reqs[0].body["messages"]  # type: ignore[union-attr]


def test_registry_and_parameters_list_valid_names() -> None:
    assert workload_registry().names() == [
        "qa",
        "rag",
        "multiturn",
        "agent",
        "json",
        "code",
        "mix",
        "replay",
        "synth",
    ]
    with pytest.raises(UsageError, match="valid: agent, code, json, mix"):
        make_workload("nope")
    with pytest.raises(UsageError, match=r"valid: prompt_tokens, overlap"):
        make_workload("rag", {"overlp": "0.5"})
    with pytest.raises(UsageError, match="not a valid float"):
        make_workload("rag", {"overlap": "high"})
    assert make_workload("agent", {"send_tools": "yes"}) == dataclasses.replace(
        make_workload("agent"), send_tools=True
    )  # type: ignore[type-var]
    for name in workload_registry().names():
        assert all(p.doc for p in workload_params(name)), name
    assert "lookup" not in [p.name for p in workload_params("mix")]


@pytest.mark.parametrize(
    ("name", "prompt_tokens", "n"),
    [("rag", 256, 50), ("rag", 1024, 8), ("json", 256, 8), ("json", 1024, 50)],
)
def test_prompt_tokens_is_the_mean_prompt_within_the_stated_tolerance(
    tok: ChatTokenizer, name: str, prompt_tokens: int, n: int
) -> None:
    requests = generate(name, n, tok, seed=3, params={"prompt_tokens": str(prompt_tokens)})
    mean = float(np.mean([r.prompt_tokens for r in requests]))
    assert abs(mean / prompt_tokens - 1) <= PROMPT_TOKENS_TOLERANCE
    default = {"rag": 0.6, "json": 0.3}[name]
    assert analyze_workload(requests, tok).overlap.hit_ratio == pytest.approx(default, abs=0.02)


def test_a_mean_too_short_for_the_overlap_is_refused_with_what_to_change(
    tok: ChatTokenizer,
) -> None:
    with pytest.raises(
        UsageError, match=re.escape("prompt_tokens=256 is too short for overlap 0.6 at -n 8")
    ):
        generate("rag", 8, tok, seed=3, params={"prompt_tokens": "256"})
