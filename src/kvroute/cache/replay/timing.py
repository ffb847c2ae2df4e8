"""When requests arrive and how long they run, for the replay. Pure; randomness is seeded.

Arrivals come from the trace (``arrival_s``, made relative to the first), or, when the
trace has no times or a rate is forced, from a Poisson process of ``rate_per_s`` drawn with
the seed. A trace without times and without a rate is replayed *sequentially*: each
request arrives when the previous one finishes, so nothing runs concurrently.

A request's run time is the trace's own (``end_s - arrival_s``) when it has one and
``use_trace_end_times`` is set; otherwise the service model::

    run_s = computed_prompt_tokens / prefill_tokens_per_s + output_tokens / decode_tokens_per_s

Both rates are per request (no contention between concurrent requests). The defaults are a
rough midpoint for an 8B model on one datacenter GPU under load; override them to match
the hardware. A request that waits for room starts later and ends later by as much.

Output lengths: the trace's ``output_len``; unknown ones are drawn (seeded) from the known
ones, or are ``default_output_tokens`` when none is known.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.errors import UsageError
from kvroute.trace.records import Request

FloatArray = npt.NDArray[np.float64]


class ArrivalSource(enum.Enum):
    TRACE = "trace"
    POISSON = "poisson"
    SEQUENTIAL = "sequential"


@dataclass(frozen=True, slots=True)
class TimingOptions:
    prefill_tokens_per_s: float = 8_000.0
    decode_tokens_per_s: float = 40.0
    use_trace_end_times: bool = True
    arrival_rate_per_s: float | None = None
    """Force Poisson arrivals at this rate (also used when the trace has no times)."""
    default_output_tokens: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0 or self.decode_tokens_per_s <= 0:
            raise UsageError("prefill and decode rates must be positive")
        if self.arrival_rate_per_s is not None and self.arrival_rate_per_s <= 0:
            raise UsageError("the arrival rate must be positive")
        if self.default_output_tokens < 0:
            raise UsageError("the default output length must be >= 0")


@dataclass(frozen=True, slots=True)
class Schedule:
    """Per request (trace order): arrival (seconds from the first; ``None`` when
    sequential), output length, and the trace's own run time (NaN when unknown or unused)."""

    source: ArrivalSource
    arrival_s: FloatArray | None
    output_tokens: list[int]
    trace_run_s: FloatArray
    num_outputs_drawn: int


def plan(requests: Sequence[Request], options: TimingOptions) -> Schedule:
    """Arrivals, output lengths and known run times for ``requests``."""
    rng = np.random.default_rng(options.seed)
    n = len(requests)
    known = [r.output_len for r in requests if r.output_len is not None]
    outputs: list[int] = []
    drawn = 0
    draws = rng.choice(np.asarray(known, dtype=np.int64), size=n) if known else None
    for i, r in enumerate(requests):
        if r.output_len is not None:
            outputs.append(r.output_len)
        else:
            drawn += 1
            outputs.append(int(draws[i]) if draws is not None else options.default_output_tokens)
    times = [r.arrival_s for r in requests]
    has_times = n > 0 and all(t is not None and math.isfinite(t) for t in times)
    arrival: FloatArray | None
    if options.arrival_rate_per_s is not None:
        source = ArrivalSource.POISSON
        gaps = rng.exponential(1.0 / options.arrival_rate_per_s, size=n)
        arrival = np.cumsum(gaps) - (gaps[0] if n else 0.0)
    elif has_times:
        source = ArrivalSource.TRACE
        arr = np.array(times, dtype=np.float64)
        arrival = arr - arr.min()
    else:
        source = ArrivalSource.SEQUENTIAL
        arrival = None
    run = np.full(n, np.nan)
    if options.use_trace_end_times and source is ArrivalSource.TRACE:
        for i, r in enumerate(requests):
            if r.end_s is not None and r.arrival_s is not None and r.end_s >= r.arrival_s:
                run[i] = r.end_s - r.arrival_s
    return Schedule(source, arrival, outputs, run, drawn)


def service_s(computed_tokens: int, output_tokens: int, options: TimingOptions) -> float:
    """Run time from the service model."""
    return (
        computed_tokens / options.prefill_tokens_per_s + output_tokens / options.decode_tokens_per_s
    )
