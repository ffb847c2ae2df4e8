"""One engine, set up for the replay: its cache model, its scheduler and its flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvroute.cache.base import CacheGeometry, PrefixCache
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay.seq import SeqBuilder, SeqPair, trace_block_size
from kvroute.predict.base import BatchScheduler
from kvroute.predict.replay import Arrivals, ReplayTimes, replay
from kvroute.predict.schedulers import SchedulerSettings, schedulers
from kvroute.predict.steptime import StepBasis, Vector
from kvroute.trace.records import Request

ENGINES = ("vllm", "sglang", "llamacpp")


@dataclass(frozen=True, slots=True)
class EngineFlags:
    """Every flag the prediction reads: the cache models' and the schedulers'."""

    cache: EngineSettings = field(default_factory=EngineSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)


@dataclass(frozen=True, slots=True)
class Workload:
    """Requests as the replay takes them: sequence pairs, output lengths, arrivals."""

    pairs: Sequence[SeqPair]
    output_tokens: Sequence[int]
    arrivals: Arrivals
    block_size_tokens: int | None
    """The trace's block size (hash-only traces), which fixes the cache model's unit."""


class EngineSim:
    """Builds a fresh cache model per replay, and the sequences at its unit size."""

    def __init__(self, engine: str, flags: EngineFlags, capacity_tokens: int | None) -> None:
        self.engine = engine
        self.flags = flags
        self.capacity_tokens = capacity_tokens
        self._factory = cache_models(flags.cache).get(engine)
        self.scheduler: BatchScheduler = schedulers(flags.scheduler).get(engine)

    def fresh_model(self, block_size_tokens: int | None) -> PrefixCache:
        return self._factory(CacheGeometry(self.capacity_tokens, block_size_tokens))

    def workload(
        self, requests: Sequence[Request], output_tokens: Sequence[int], arrivals: Arrivals
    ) -> Workload:
        """Sequence pairs for ``requests`` (``InputError`` for untokenized prompts)."""
        block = trace_block_size(requests[0]) if requests else None
        model = self.fresh_model(block)
        builder = SeqBuilder(
            model.unit_tokens,
            block_size_tokens=block,
            keep_token_ids=model.needs_token_ids and block is None,
        )
        pairs = builder.build(requests, range(len(requests)), output_tokens)
        return Workload(pairs, output_tokens, arrivals, block)

    def run(
        self, work: Workload, basis: StepBasis, coefficients: Vector, *, record: bool = False
    ) -> ReplayTimes:
        model = self.fresh_model(work.block_size_tokens)
        return replay(
            work.pairs,
            work.output_tokens,
            work.arrivals,
            model,
            self.scheduler,
            basis,
            coefficients,
            record_basis=record,
        )
