"""End to end against a real llama-server: the engine's own counters see a RAG
workload's shared template and a code workload's distinct contexts."""

from __future__ import annotations

import pytest

from kvroute.bench.results.record import Outcome
from kvroute.bench.results.result import BenchResult
from kvroute.bench.run_options import BenchEndpoint, RunOptions
from kvroute.bench.runner import run_bench, workload_info
from kvroute.bench.schedule import ClosedLoop
from kvroute.bench.scrape import CacheMode
from kvroute.bench.workloads.registry import generate
from kvroute.engines.state import EngineRecord
from kvroute.trace.tokenizer import load_tokenizer


def bench(server: EngineRecord, workload: str, params: dict[str, str]) -> BenchResult:
    tok = load_tokenizer()
    requests = generate(workload, 8, tok, seed=5, params=params)
    options = RunOptions(
        loads=(ClosedLoop(2),),
        cache=CacheMode.COLD,
        max_duration_s=240,
        first_token_timeout_s=120,
        timeout_s=180,
    )
    info = workload_info(workload, params, 5, tok.name, requests)
    return run_bench(requests, info, [BenchEndpoint("llama", server.base_url)], options)


@pytest.mark.engine
@pytest.mark.llamacpp
@pytest.mark.slow
def test_rag_hits_the_engine_cache_more_than_code(llamacpp_server: EngineRecord) -> None:
    rag = bench(
        llamacpp_server, "rag", {"prompt_tokens": "600", "overlap": "0.7", "output_tokens": "4"}
    ).runs[0]
    code = bench(llamacpp_server, "code", {"context_tokens": "256", "output_tokens": "4"}).runs[0]
    for run in (rag, code):
        assert run.endpoint.engine == "llamacpp" and run.endpoint.cache_state == "cold"
        assert run.endpoint.model == llamacpp_server.model_name
        assert all(r.outcome is Outcome.OK for r in run.requests), run.summary.errors
        assert all(
            r.cache_source == "timings" and r.first_token_s is not None for r in run.requests
        )
        assert run.summary.ttft_s.count == 8 and run.summary.cache.num_with_reading == 8
    rag_hit, code_hit = rag.summary.cache.engine_hit_rate, code.summary.cache.engine_hit_rate
    assert rag_hit is not None and code_hit is not None
    assert rag_hit > code_hit + 0.25, (rag_hit, code_hit)
    assert code_hit < 0.15
    # The per-response readings add up to the server's counters over the run.
    assert rag.summary.cache.response_cached_tokens == rag.summary.cache.engine_cached_tokens
    assert rag.summary.cache.response_prompt_tokens == rag.summary.cache.engine_prompt_tokens
