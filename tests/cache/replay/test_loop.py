"""The replay in time: concurrency pins memory, queueing, rejection, determinism."""

from __future__ import annotations

import numpy as np

from kvroute.cache.base import CacheGeometry
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.models.sglang import SglangConfig
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay.loop import replay
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.trace.records import Request, TokenPrompt


def req(tokens: list[int], t: float, end: float | None = None, out: int = 1) -> Request:
    return Request(
        prompt=TokenPrompt(np.array(tokens, dtype=np.uint32)),
        arrival_s=t,
        end_s=end,
        output_len=out,
    )


def run(engine: str, reqs: list[Request], capacity: int | None):  # type: ignore[no-untyped-def]
    model = cache_models().get(engine)(CacheGeometry(capacity))
    t = TimingOptions()
    out = replay(reqs, model, plan(reqs, t), t)
    model.check_invariants()
    return out


def test_concurrent_requests_hold_memory_and_the_next_waits() -> None:
    long = list(range(60))
    reqs = [
        req(long, 0.0, 10.0),
        req([500 + i for i in range(60)], 1.0, 2.0),
        req([*long, 1], 5.0, 6.0),
    ]
    out = run("sglang", reqs, 100)
    # The second cannot fit next to the first (60 + 60 > 100): it starts when the first ends.
    assert out.wait_s[1] == 9.0 and out.peak_running == 1
    # The second evicted the first's prompt to fit, so the third (queued behind it) misses.
    assert out.cached_tokens.tolist() == [0, 0, 0] and out.wait_s[2] == 6.0
    roomy = run("sglang", reqs, 1000)
    assert roomy.wait_s[1] == 0.0 and roomy.peak_running == 2 and roomy.cached_tokens[2] == 60
    assert roomy.peak_pinned_tokens == 120


def test_too_large_requests_are_rejected_and_do_not_block() -> None:
    reqs = [req(list(range(200)), 0.0, 1.0), req([1, 2, 3], 0.5, 1.0)]
    out = run("vllm", reqs, 64)
    assert out.admitted.tolist() == [False, True] and out.cached_tokens[0] == 0


def test_unsorted_trace_is_replayed_in_arrival_order() -> None:
    reqs = [req([1, 2, 3, 4, 5], 5.0, 6.0), req([1, 2, 3, 4, 5, 6], 0.0, 1.0)]
    out = run("sglang", reqs, None)
    assert out.cached_tokens.tolist() == [4, 0]  # the later-listed one ran first


def test_trace_without_end_times_uses_the_service_model() -> None:
    reqs = [req(list(range(1000)), 0.0, out=41), req([*list(range(1000)), 1], 0.001)]
    out = run("vllm", reqs, None)
    # 1000 / 8000 s prefill + 41 / 40 s decode: the second arrives while the first runs.
    assert out.peak_running == 2 and out.cached_tokens[1] == 992


def _slot_trace(a1_end: float) -> list[Request]:
    """Two requests fill llama.cpp's two slots; two more that share a prefix with the first
    one only arrive while both run (deferred) and finish late."""
    shared = list(range(100))
    return [
        req(shared, 0.0, 1.0),
        req([1000 + i for i in range(100)], 0.0, a1_end),
        req([*shared[:80], *range(5000, 5020)], 0.1, 9.0),
        req([*shared[:80], *range(6000, 6020)], 0.2, 9.0),
    ]


def _llamacpp_two_slots(reqs: list[Request]):  # type: ignore[no-untyped-def]
    settings = EngineSettings(llamacpp=LlamaCppConfig(num_slots=2, cache_ram_mib=0))
    model = cache_models(settings).get("llamacpp")(CacheGeometry(10_000))
    t = TimingOptions()
    out = replay(reqs, model, plan(reqs, t), t)
    model.check_invariants()
    return out


def test_llamacpp_restarts_deferred_requests_newest_first_when_a_step_frees_several() -> None:
    # Both slots free in one step: each release moves the oldest deferred request to the
    # front of llama.cpp's queue, so the newer one (3) starts first and takes the slot
    # that shares its prefix; the older one (2) gets the other slot and misses.
    same_step = _llamacpp_two_slots(_slot_trace(a1_end=1.0))
    assert same_step.cached_tokens.tolist() == [0, 0, 0, 80]
    assert same_step.wait_s[2:].tolist() == [0.9, 0.8]
    # One slot per step: the oldest deferred request restarts first and gets the hit.
    staggered = _llamacpp_two_slots(_slot_trace(a1_end=1.5))
    assert staggered.cached_tokens.tolist() == [0, 0, 80, 0]


def test_vllm_and_sglang_restart_first_come_first_served() -> None:
    # Two deferred requests with the same prompt: the one that starts first hits request
    # 0's prefix and caches the prompt, so the one after it hits that whole prompt.
    reqs = _slot_trace(a1_end=1.0)
    reqs[3] = req(list(reqs[2].prompt.token_ids), 0.2, 9.0)  # type: ignore[union-attr]
    settings = EngineSettings(
        vllm=VllmConfig(max_num_seqs=2), sglang=SglangConfig(max_running_requests=2)
    )
    for engine, whole_prompt in (("vllm", 96), ("sglang", 99)):
        model = cache_models(settings).get(engine)(CacheGeometry(10_000))
        t = TimingOptions()
        out = replay(reqs, model, plan(reqs, t), t)
        assert out.wait_s[2:].tolist() == [0.9, 0.8]
        assert out.cached_tokens[2:].tolist() == [80, whole_prompt]  # oldest first
