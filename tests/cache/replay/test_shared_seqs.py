"""Sequences built once and shared by several replays give the results of building them
per replay: every engine, capacities that evict and one that does not, token and
hash-only traces, outputs cached or not; and simulate's sweep reuses the pool's own
replay where a sweep point is the pool."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cache.cache_traces import block_trace, token_trace
from kvroute.cache.base import CacheGeometry
from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.registry import cache_models
from kvroute.cache.replay import loop as replay_module
from kvroute.cache.replay.loop import ReplayOutcome, SharedSeqs, replay, seq_builder, shareable
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate
from kvroute.trace.records import Request

ENGINES = ("llamacpp", "vllm", "sglang")


def _same(a: ReplayOutcome, b: ReplayOutcome) -> None:
    for f in dataclasses.fields(ReplayOutcome):
        if f.name == "elapsed_s":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("cache_outputs", [True, False])
@pytest.mark.parametrize(
    ("trace", "block", "caps"),
    [("block", 8, [40, 400, None]), ("token", None, [200, 3000, None])],
)
def test_shared_sequences_replay_like_fresh_ones(
    trace: str, block: int | None, caps: list[int | None], cache_outputs: bool
) -> None:
    requests: list[Request] = (
        block_trace(500, seed=2, block=8) if trace == "block" else token_trace(300, seed=4)
    )
    t = TimingOptions()
    schedule = plan(requests, t)
    registry = cache_models()
    for engine in ENGINES:
        factory = registry.get(engine)
        shared = None
        for cap in caps:
            geometry = CacheGeometry(cap, block, None)
            builder = seq_builder(requests, factory(geometry), cache_outputs=cache_outputs)
            if shared is None:
                shared = SharedSeqs(requests, schedule, builder)
            assert shared.fits(builder)
            fresh = replay(requests, factory(geometry), schedule, t, cache_outputs=cache_outputs)
            again = replay(
                requests,
                factory(geometry),
                schedule,
                t,
                cache_outputs=cache_outputs,
                shared=shared,
            )
            _same(fresh, again)


def test_shared_sequences_built_another_way_are_not_used() -> None:
    requests = token_trace(50, seed=1)
    t = TimingOptions()
    schedule = plan(requests, t)
    registry = cache_models()
    vllm = registry.get("vllm")(CacheGeometry(1000, None, None))
    sglang = registry.get("sglang")(CacheGeometry(1000, None, None))
    shared = SharedSeqs(requests, schedule, seq_builder(requests, vllm))
    assert not shared.fits(seq_builder(requests, sglang))  # 16-token blocks vs 1-token pages
    _same(
        replay(requests, registry.get("sglang")(CacheGeometry(1000, None, None)), schedule, t),
        replay(requests, sglang, schedule, t, shared=shared),
    )


def test_shareable_is_bounded_by_the_key_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = token_trace(100, seed=0)
    outputs = [10] * len(requests)
    assert shareable(requests, 1, outputs)
    monkeypatch.setattr(replay_module, "SHARED_KEYS_BUDGET", 100)
    assert not shareable(requests, 1, outputs)


def test_sweep_through_the_pool_equals_separate_runs() -> None:
    """One simulate with the pool inside the sweep equals a simulate per capacity."""
    requests = block_trace(400, seed=7, block=8)
    grid = (64, 256, 1024)
    src = TraceSource("t", "kvroute")
    swept = simulate(
        requests,
        capacity_from_tokens(256),
        src,
        options=SimulateOptions(sweep_capacities=grid),
    )
    for curve in swept.sweep:
        for cap, hit in zip(curve.capacity_tokens, curve.hit_ratio, strict=True):
            alone = simulate(
                requests,
                capacity_from_tokens(cap),
                src,
                options=SimulateOptions(engines=(curve.engine,)),
            )
            assert alone.engines[0].hit_ratio == hit
    pool_runs = {e.engine: e.hit_ratio for e in swept.engines}
    for curve in swept.sweep:
        assert curve.hit_ratio[1] == pool_runs[curve.engine]
