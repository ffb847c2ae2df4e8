"""Evidence from the prefix-cache models: prefill each engine would save. Pure.

Each call replays the requests in time through the engine's cache model of
:mod:`kvroute.cache` (the models and replay of ``kvroute simulate``) at the pool, and
gives per request the cached prompt tokens (benefit) over the prompt tokens (weight).
Prefill saved is the part of the work the engine choice moves most directly; it says
nothing of decode speed or scheduling, which is what ``kvroute predict`` adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kvroute.advise.base import EngineFigures
from kvroute.advise.hardware import Hardware
from kvroute.cache.base import CacheGeometry
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay.loop import replay
from kvroute.cache.replay.seq import trace_block_size
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.trace.records import Request

METRIC = "prefill_saved"


@dataclass(frozen=True, slots=True)
class HitEvidence:
    """:class:`~kvroute.advise.base.LatencyEvidence` from cache hits."""

    settings: EngineSettings = field(default_factory=EngineSettings)
    timing: TimingOptions = field(default_factory=TimingOptions)

    @property
    def metric(self) -> str:
        return METRIC

    def figures(
        self,
        requests: Sequence[Request],
        engine: str,
        hardware: Hardware,
        *,
        capacity_tokens: int | None = None,
    ) -> EngineFigures:
        pool = hardware.pool_tokens if capacity_tokens is None else capacity_tokens
        if not requests:
            empty = np.zeros(0, dtype=np.float64)
            return EngineFigures(engine, METRIC, empty, empty, pool)
        geometry = CacheGeometry(
            pool, trace_block_size(requests[0]), hardware.capacity.kv_bytes_per_token
        )
        model = cache_models(self.settings).get(engine)(geometry)
        outcome = replay(requests, model, plan(requests, self.timing), self.timing)
        return EngineFigures(
            engine=engine,
            metric=METRIC,
            benefit=outcome.cached_tokens.astype(np.float64),
            weight=outcome.prompt_tokens.astype(np.float64),
            capacity_tokens=pool,
            details={
                "peak_running": float(outcome.peak_running),
                "evicted_tokens": float(outcome.stats.evicted_tokens),
                "num_rejected": float((~outcome.admitted).sum()),
            },
        )
