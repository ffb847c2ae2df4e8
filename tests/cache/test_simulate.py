"""An unbounded cache reproduces analyze's ideal exactly (up to each engine's documented
cap), results are deterministic, and simulate() assembles what the CLI reports."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cache.cache_traces import block_trace, token_trace
from kvroute.analyze.prefix_index import lcp_tokens_bruteforce
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.cache.base import CacheGeometry
from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.registry import cache_models
from kvroute.cache.replay.loop import ReplayOutcome, replay
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.cache.result import Ideal
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate, sweep_grid
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt


def _run(
    requests: list[Request], engine: str, capacity: int | None, *, cache_outputs: bool = False
) -> ReplayOutcome:
    block = (
        requests[0].prompt.block_size_tokens
        if isinstance(requests[0].prompt, BlockPrompt)
        else None
    )
    model = cache_models().get(engine)(CacheGeometry(capacity, block))
    timing = TimingOptions()
    out = replay(requests, model, plan(requests, timing), timing, cache_outputs=cache_outputs)
    model.check_invariants()
    return out


def _token_lcp(requests: list[Request]) -> np.ndarray:
    prompts = []
    for r in requests:
        assert isinstance(r.prompt, TokenPrompt)
        prompts.append(r.prompt.token_ids)
    return np.array(lcp_tokens_bruteforce(prompts), dtype=np.int64)


@pytest.mark.parametrize("timed", [True, False])
def test_unbounded_sglang_is_the_token_level_ideal_minus_the_last_token(timed: bool) -> None:
    reqs = token_trace(250, timed=timed)
    lengths = np.array([r.prompt.num_tokens for r in reqs if isinstance(r.prompt, TokenPrompt)])
    lcp = _token_lcp(reqs)
    out = _run(reqs, "sglang", None)
    assert out.admitted.all()
    # Per request: the longest prefix any earlier prompt had, capped at L - 1.
    assert np.array_equal(out.cached_tokens, np.minimum(lcp, np.maximum(lengths - 1, 0)))
    ideal = analyze_requests(reqs, trace_path="t", trace_format="t", tokenizer_name=None).overlap
    full = int(np.sum((lcp == lengths) & (lengths > 0)))
    assert full > 0  # the trace has exact repeats, so the cap matters
    assert int(out.cached_tokens.sum()) == ideal.reusable_tokens - full


@pytest.mark.parametrize("block", [16, 4])
def test_unbounded_vllm_is_the_block_level_ideal_minus_the_capped_block(block: int) -> None:
    reqs = token_trace(250)
    lengths = np.array([r.prompt.num_tokens for r in reqs if isinstance(r.prompt, TokenPrompt)])
    lcp = _token_lcp(reqs)
    from kvroute.cache.models.vllm import VllmConfig
    from kvroute.cache.registry import EngineSettings

    model = cache_models(EngineSettings(vllm=VllmConfig(block_size_tokens=block))).get("vllm")(
        CacheGeometry(None)
    )
    timing = TimingOptions()
    out = replay(reqs, model, plan(reqs, timing), timing, cache_outputs=False)
    expected = block * np.minimum(lcp // block, np.maximum(lengths - 1, 0) // block)
    assert np.array_equal(out.cached_tokens, expected)
    ideal = analyze_requests(
        reqs,
        trace_path="t",
        trace_format="t",
        tokenizer_name=None,
        options=AnalyzeOptions(block_size_tokens=block),
    ).overlap
    capped = int(np.sum((lcp == lengths) & (lengths % block == 0) & (lengths > 0)))
    assert int(out.cached_tokens.sum()) == ideal.block_reusable_tokens - block * capped


def test_unbounded_on_hash_only_traces() -> None:
    block = 8
    reqs = block_trace(250, block=block)
    ideal = analyze_requests(reqs, trace_path="t", trace_format="t", tokenizer_name=None).overlap
    ids = [r.prompt.block_hashes.tolist() for r in reqs if isinstance(r.prompt, BlockPrompt)]
    lengths = np.array([r.prompt.num_tokens for r in reqs if isinstance(r.prompt, BlockPrompt)])
    matched = np.array(
        [max((_common(ids[i], ids[j]) for j in range(i)), default=0) for i in range(len(ids))]
    )
    lcp = np.minimum(matched * block, lengths)  # analyze's block-level LCP, partial block included
    sglang = _run(reqs, "sglang", None)
    vllm = _run(reqs, "vllm", None)
    assert np.array_equal(sglang.cached_tokens, np.minimum(lcp, lengths - 1))
    full_blocks = np.minimum(matched, lengths // block)
    assert np.array_equal(
        vllm.cached_tokens, block * np.minimum(full_blocks, (lengths - 1) // block)
    )
    # Aggregates against analyze: one token per fully repeated prompt (SGLang), one block
    # per fully repeated block-aligned prompt (vLLM).
    assert int(sglang.cached_tokens.sum()) == ideal.reusable_tokens - int(np.sum(lcp == lengths))
    capped = (lengths % block == 0) & (full_blocks == lengths // block)
    assert int(vllm.cached_tokens.sum()) == ideal.block_reusable_tokens - block * int(capped.sum())


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_outputs_cached_can_only_add_hits() -> None:
    reqs = token_trace(200, outputs_known=True)
    without = _run(reqs, "sglang", None, cache_outputs=False)
    with_outputs = _run(reqs, "sglang", None, cache_outputs=True)
    assert (with_outputs.cached_tokens >= without.cached_tokens).all()
    assert with_outputs.cached_tokens.sum() > without.cached_tokens.sum()  # sessions repeat answers


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "sglang"])
def test_replay_is_deterministic(engine: str) -> None:
    reqs = token_trace(200)
    a = _run(reqs, engine, 600, cache_outputs=True)
    b = _run(reqs, engine, 600, cache_outputs=True)
    assert np.array_equal(a.cached_tokens, b.cached_tokens)
    assert np.array_equal(a.wait_s, b.wait_s, equal_nan=True)
    assert a.stats == b.stats


def test_simulate_assembles_engines_sweep_and_notes() -> None:
    reqs = token_trace(120, timed=False)
    ideal = Ideal("token", 0.5, 100, 16, 0.4, 80)
    result = simulate(
        reqs,
        capacity_from_tokens(2000),
        TraceSource("trace.jsonl", "kvroute"),
        options=SimulateOptions(sweep_capacities=(256, 1024), timing=TimingOptions(seed=3)),
        ideal=ideal,
    )
    assert result.schema == "kvroute.simulate/1"
    assert [e.engine for e in result.engines] == ["llamacpp", "vllm", "sglang"]
    assert [c.capacity_tokens for c in result.sweep] == [[256, 1024]] * 3
    for e in result.engines:
        assert e.prompt_tokens == result.trace.prompt_tokens
        assert e.cached_tokens + e.computed_tokens == e.prompt_tokens  # nothing rejected
        assert 0 <= e.hit_ratio <= 1 and e.num_rejected == 0
    assert result.replay.arrivals == "sequential"
    assert any("one after another" in n for n in result.notes)
    assert result.engines[1].settings["block_size_tokens"] == 16


def test_sweep_grid_spans_largest_request_to_unique_tokens() -> None:
    grid = sweep_grid(prompt_tokens=1_000_000, reusable_tokens=600_000, largest_request_tokens=3000)
    assert grid[0] == 8192 and grid[-1] == 524_288 and len(grid) <= 10
    assert all(b > a for a, b in itertools.pairwise(grid))


def test_sweep_grid_reaches_past_the_simulated_pool() -> None:
    grid = sweep_grid(
        prompt_tokens=200_000,
        reusable_tokens=100_000,
        largest_request_tokens=3000,
        pool_tokens=448_000,
    )
    assert grid[-1] > 448_000 and grid[-1] == 524_288
