"""The records adapters return: counter deltas, hit rates, capacity."""

from __future__ import annotations

import pytest

from kvroute.engines.base import (
    CacheCounters,
    Health,
    HealthState,
    KvCapacity,
    ResponseCacheUsage,
    UsageSource,
)
from kvroute.errors import EngineError


def test_counter_delta_and_hit_rate() -> None:
    before = CacheCounters(prompt_tokens=100, cached_tokens=40)
    after = CacheCounters(prompt_tokens=188, cached_tokens=83)
    delta = after.since(before)
    assert delta == CacheCounters(prompt_tokens=88, cached_tokens=43)
    assert delta.hit_rate == pytest.approx(43 / 88)


def test_unknown_counters_stay_unknown() -> None:
    unknown = CacheCounters(prompt_tokens=None, cached_tokens=None)
    assert unknown.since(unknown) == unknown
    assert unknown.hit_rate is None
    assert CacheCounters(prompt_tokens=0, cached_tokens=0).hit_rate is None


def test_counter_going_down_means_restart() -> None:
    with pytest.raises(EngineError, match="restarted"):
        CacheCounters(prompt_tokens=5, cached_tokens=0).since(
            CacheCounters(prompt_tokens=10, cached_tokens=0)
        )


def test_capacity_in_tokens() -> None:
    assert KvCapacity(block_size_tokens=32, num_blocks=728).total_tokens == 23296
    slots = KvCapacity(block_size_tokens=1, num_blocks=4 * 2048, num_slots=4, slot_len_tokens=2048)
    assert slots.total_tokens == 8192


def test_small_records() -> None:
    assert Health(HealthState.READY).is_ready
    assert not Health(HealthState.LOADING, "loading model").is_ready
    usage = ResponseCacheUsage(
        prompt_tokens=44, cached_tokens=43, source=UsageSource.LLAMACPP_TIMINGS
    )
    assert usage.computed_tokens == 1
