"""Run several engine models over one trace, at one capacity and optionally a sweep.

The library behind ``kvroute simulate``: takes tokenized requests (token ids or block
hashes), returns a :class:`~kvroute.cache.result.SimulationResult`. The ideal line comes
from ``kvroute analyze`` and is passed in, so this package does not depend on analysis.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvroute.cache.base import CacheGeometry, PrefixCache
from kvroute.cache.capacity import Capacity
from kvroute.cache.compare import compare_cached_tokens
from kvroute.cache.registry import CacheFactory, EngineSettings, cache_models
from kvroute.cache.replay.loop import ReplayOutcome, SharedSeqs, replay, seq_builder, shareable
from kvroute.cache.replay.seq import final_tokens, trace_block_size
from kvroute.cache.replay.timing import ArrivalSource, FloatArray, Schedule, TimingOptions, plan
from kvroute.cache.result import (
    SCHEMA,
    Curve,
    EngineRun,
    Ideal,
    ReplaySetup,
    SimulationResult,
    TraceSummary,
)
from kvroute.cache.saturation import judge_saturation
from kvroute.errors import EmptyTraceError
from kvroute.stats import describe
from kvroute.trace.model_names import tokenizer_warning
from kvroute.trace.records import Request
from kvroute.types import JSONValue

Progress = Callable[[str], None]
MAX_SWEEP_POINTS = 10


@dataclass(frozen=True, slots=True)
class SimulateOptions:
    engines: tuple[str, ...] = ("llamacpp", "vllm", "sglang")
    settings: EngineSettings = field(default_factory=EngineSettings)
    timing: TimingOptions = field(default_factory=TimingOptions)
    cache_outputs: bool = True
    """Cache generated tokens as the engines do; off to compare with the prompt-only ideal."""
    sweep_capacities: tuple[int, ...] = ()
    """KV capacities (tokens) to replay each engine at, for the hit-vs-capacity curves."""
    auto_sweep: bool = False
    """With no ``sweep_capacities``: powers of two from twice the longest request up to the
    trace's unique prompt tokens (see :func:`sweep_grid`)."""


@dataclass(frozen=True, slots=True)
class TraceSource:
    """Where the requests came from, for the result."""

    path: str
    format: str
    tokenizer: str | None = None
    num_skipped: int = 0


def simulate(
    requests: Sequence[Request],
    capacity: Capacity,
    source: TraceSource,
    *,
    options: SimulateOptions | None = None,
    ideal: Ideal | None = None,
    progress: Progress | None = None,
) -> SimulationResult:
    """Replay ``requests`` through each engine model at ``capacity`` (and each sweep point).

    Raises ``EmptyTraceError`` for no requests, ``UsageError`` for an unknown engine and
    ``InputError`` for prompts that are not tokenized or mix forms.
    """
    started = time.perf_counter()
    opts = options or SimulateOptions()
    if not requests:
        raise EmptyTraceError("the trace has no requests", path=source.path)
    registry = cache_models(opts.settings)
    factories = [(name, registry.get(name)) for name in opts.engines]
    block = trace_block_size(requests[0])
    schedule = plan(requests, opts.timing)
    notes = _notes(opts, capacity, block, schedule)
    geometry = CacheGeometry(capacity.tokens, block, capacity.kv_bytes_per_token)
    reported = [r.reported_cached_tokens for r in requests]
    runner = _Runner(requests, schedule, opts)
    runs = []
    at_pool: dict[str, ReplayOutcome] = {}
    for name, factory in factories:
        if progress is not None:
            progress(f"{name} at {_cap_text(capacity.tokens)} tokens")
        outcome = runner.replay(factory(geometry))
        at_pool[name] = outcome
        runs.append(
            _engine_run(
                outcome, _settings_of(opts.settings, name), capacity, reported, schedule.arrival_s
            )
        )
    grid = list(opts.sweep_capacities)
    if not grid and opts.auto_sweep:
        total = sum(_prompt_len(r) for r in requests)
        reusable = ideal.reusable_tokens if ideal is not None else 0
        grid = sweep_grid(
            total,
            reusable,
            largest_request_tokens(requests, schedule.output_tokens),
            pool_tokens=capacity.tokens,
        )
    curves = _sweep(runner, factories, grid, block, capacity, at_pool, progress)
    if (
        ideal is not None
        and opts.cache_outputs
        and any(e.hit_ratio > ideal.hit_ratio for e in runs)
    ):
        notes.append(
            "an engine beats the ideal: engines also cache generated tokens, which later turns "
            "repeat, while the ideal counts prompt prefixes only (--no-cache-outputs to compare)"
        )
    return SimulationResult(
        schema=SCHEMA,
        trace=_trace_summary(requests, source, block),
        capacity=capacity,
        replay=_replay_setup(schedule, opts),
        ideal=ideal,
        engines=runs,
        sweep=curves,
        notes=notes,
        elapsed_s=time.perf_counter() - started,
    )


class _Runner:
    """Replays one trace through many models, building each kind of sequence once when
    the trace is small enough to hold them (:class:`~kvroute.cache.replay.loop.SharedSeqs`)."""

    def __init__(
        self, requests: Sequence[Request], schedule: Schedule, opts: SimulateOptions
    ) -> None:
        self._requests = requests
        self._schedule = schedule
        self._opts = opts
        self._shared: dict[tuple[int, bool], SharedSeqs | None] = {}

    def replay(self, model: PrefixCache) -> ReplayOutcome:
        opts = self._opts
        builder = seq_builder(self._requests, model, cache_outputs=opts.cache_outputs)
        key = (builder.unit_tokens, builder.keep_token_ids)
        if key not in self._shared:
            fits = shareable(self._requests, builder.unit_tokens, self._schedule.output_tokens)
            self._shared[key] = (
                SharedSeqs(self._requests, self._schedule, builder) if fits else None
            )
        return replay(
            self._requests,
            model,
            self._schedule,
            opts.timing,
            cache_outputs=opts.cache_outputs,
            shared=self._shared[key],
        )


def _sweep(
    runner: _Runner,
    factories: list[tuple[str, CacheFactory]],
    grid: list[int],
    block: int | None,
    capacity: Capacity,
    at_pool: dict[str, ReplayOutcome],
    progress: Progress | None,
) -> list[Curve]:
    """Each engine's hit ratio, evictions and rejections at every capacity of ``grid``
    (the pool's own replay where a grid point is the pool)."""
    curves = []
    for name, factory in factories:
        points = []
        for cap in grid:
            if cap == capacity.tokens:
                points.append(at_pool[name])
                continue
            if progress is not None:
                progress(f"{name} at {_cap_text(cap)} tokens (sweep)")
            points.append(
                runner.replay(factory(CacheGeometry(cap, block, capacity.kv_bytes_per_token)))
            )
        if points:
            curves.append(
                Curve(
                    engine=name,
                    capacity_tokens=grid,
                    hit_ratio=[_hit_ratio(p) for p in points],
                    evicted_tokens=[p.stats.evicted_tokens for p in points],
                    num_rejected=[int((~p.admitted).sum()) for p in points],
                )
            )
    return curves


def _trace_summary(
    requests: Sequence[Request], source: TraceSource, block: int | None
) -> TraceSummary:
    return TraceSummary(
        path=source.path,
        format=source.format,
        num_requests=len(requests),
        num_skipped=source.num_skipped,
        prompt_form="tokens" if block is None else "block_hashes",
        tokenizer=source.tokenizer if block is None else None,
        block_size_tokens=block,
        prompt_tokens=int(sum(_prompt_len(r) for r in requests)),
        num_outputs_known=sum(r.output_len is not None for r in requests),
        tokenizer_warning=tokenizer_warning(
            source.tokenizer if block is None else None,
            dict(Counter(r.model for r in requests if r.model)),
        ),
    )


def _replay_setup(schedule: Schedule, opts: SimulateOptions) -> ReplaySetup:
    """How the replay was timed, as the result records it."""
    t = opts.timing
    return ReplaySetup(
        arrivals=schedule.source.value,
        use_trace_end_times=t.use_trace_end_times,
        num_trace_run_times=int(np.isfinite(schedule.trace_run_s).sum()),
        prefill_tokens_per_s=t.prefill_tokens_per_s,
        decode_tokens_per_s=t.decode_tokens_per_s,
        arrival_rate_per_s=t.arrival_rate_per_s,
        default_output_tokens=t.default_output_tokens,
        num_outputs_drawn=schedule.num_outputs_drawn,
        cache_outputs=opts.cache_outputs,
        seed=t.seed,
    )


def _prompt_len(r: Request) -> int:
    p = r.prompt
    return int(getattr(p, "num_tokens", 0))


def _cap_text(tokens: int | None) -> str:
    return "unbounded" if tokens is None else f"{tokens:,}"


def _hit_ratio(o: ReplayOutcome) -> float:
    total = int(o.prompt_tokens.sum())
    return int(o.cached_tokens.sum()) / total if total else 0.0


def _engine_run(
    o: ReplayOutcome,
    settings: dict[str, JSONValue],
    capacity: Capacity,
    reported: list[int | None],
    arrival_s: FloatArray | None,
) -> EngineRun:
    prompt = int(o.prompt_tokens.sum())
    cached = int(o.cached_tokens.sum())
    served = o.admitted
    computed = int((o.prompt_tokens[served] - o.cached_tokens[served]).sum())
    lengths = o.prompt_tokens[served].astype(np.float64)
    share = np.divide(
        o.cached_tokens[served], lengths, out=np.zeros_like(lengths), where=lengths > 0
    )
    bpt = capacity.kv_bytes_per_token
    return EngineRun(
        engine=o.engine,
        settings=settings,
        capacity_tokens=o.capacity_tokens,
        unit_tokens=o.unit_tokens,
        num_requests=int(o.admitted.shape[0]),
        num_admitted=int(served.sum()),
        num_rejected=int((~served).sum()),
        prompt_tokens=prompt,
        cached_tokens=cached,
        computed_tokens=computed,
        hit_ratio=cached / prompt if prompt else 0.0,
        share_requests_with_hit=float(np.mean(o.cached_tokens[served] > 0))
        if served.any()
        else 0.0,
        per_request_hit=describe(share, bins=np.linspace(0, 1, 11)),
        evicted_tokens=o.stats.evicted_tokens,
        num_evictions=o.stats.num_evictions,
        peak_pinned_tokens=o.peak_pinned_tokens,
        peak_pinned_bytes=None if bpt is None else o.peak_pinned_tokens * bpt,
        peak_running=o.peak_running,
        wait_s=describe(o.wait_s[np.isfinite(o.wait_s)], log_bins=False),
        saturation=None if arrival_s is None else judge_saturation(arrival_s, o.wait_s, o.end_s),
        counters=dict(o.stats.extra),
        vs_reported=compare_cached_tokens(
            o.cached_tokens.tolist(),
            reported,
            o.prompt_tokens.tolist(),
            tolerance_tokens=o.unit_tokens,
        ),
        elapsed_s=o.elapsed_s,
    )


def _settings_of(settings: EngineSettings, engine: str) -> dict[str, JSONValue]:
    config = getattr(settings, engine, None)
    if config is None or not dataclasses.is_dataclass(config):
        return {}
    out: dict[str, JSONValue] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = value.value if isinstance(value, enum.Enum) else value
    return out


def _notes(
    opts: SimulateOptions, capacity: Capacity, block: int | None, schedule: Schedule
) -> list[str]:
    notes = []
    if block is not None:
        notes.append(
            f"hash-only trace: every model works on the trace's {block}-token blocks "
            "(vLLM's block size and SGLang's page size are set to it)"
        )
        if "llamacpp" in opts.engines and opts.settings.llamacpp.cache_reuse > 0:
            notes.append("llama.cpp --cache-reuse needs token ids; ignored on a hash-only trace")
    llama = opts.settings.llamacpp
    if (
        "llamacpp" in opts.engines
        and llama.cache_ram_mib > 0
        and capacity.kv_bytes_per_token is None
    ):
        notes.append(
            "llama.cpp --cache-ram is in MiB but the KV bytes per token are unknown (give --model); "
            "its host cache is limited to n_ctx tokens instead"
        )
    if schedule.source is ArrivalSource.SEQUENTIAL:
        notes.append(
            "the trace has no arrival times: requests are replayed one after another "
            "(pass --rate for Poisson arrivals)"
        )
    if schedule.num_outputs_drawn:
        notes.append(
            f"{schedule.num_outputs_drawn:,} requests have no output length: drawn from the known ones "
            f"(or {opts.timing.default_output_tokens} tokens when none is known)"
        )
    if not opts.cache_outputs:
        notes.append("generated tokens are not cached (--no-cache-outputs)")
    return notes


def sweep_grid(
    prompt_tokens: int,
    reusable_tokens: int,
    largest_request_tokens: int,
    *,
    pool_tokens: int | None = None,
) -> list[int]:
    """Capacities for a sweep: powers of two from twice the largest request up to the
    trace's unique prompt tokens (where an LRU cache stops evicting prompts), and at
    least one past ``pool_tokens`` (the simulated pool), so the curve shows where that
    pool sits on it."""
    unique = max(prompt_tokens - reusable_tokens, 1)
    lo = 1 << max(int(np.ceil(np.log2(max(2 * largest_request_tokens, 256)))), 0)
    hi = 1 << int(np.ceil(np.log2(max(unique, lo, (pool_tokens or 0) + 1))))
    grid = []
    c = lo
    while c <= hi:
        grid.append(c)
        c *= 2
    if len(grid) > MAX_SWEEP_POINTS:
        idx = np.unique(np.linspace(0, len(grid) - 1, MAX_SWEEP_POINTS).round().astype(int))
        grid = [grid[i] for i in idx]
    return grid


def largest_request_tokens(requests: Sequence[Request], schedule_outputs: Sequence[int]) -> int:
    """The longest prompt + output sequence of the trace."""
    return max(
        (final_tokens(_prompt_len(r), o) for r, o in zip(requests, schedule_outputs, strict=True)),
        default=0,
    )
