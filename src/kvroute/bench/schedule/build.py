"""The schedule: each request's slot (intended send time, think time, cancellation) under a load.

Open loop fixes every request's intended send time before the run, as an offset from
the run's start (an absolute deadline: a late dispatch never shifts the ones after
it). Inter-arrival gaps are exponential (Poisson), gamma (``burstiness`` is the shape
*k*: the squared coefficient of variation of the gaps is 1/*k*, so *k* < 1 is burstier
than Poisson) or constant. A ramp-up raises the rate linearly from 0 over
``ramp_up_s``: arrivals are drawn at the full rate and the time axis is warped so that
the cumulative count follows ``Λ(t) = R t² / (2 T)`` for ``t < T`` and
``R T / 2 + R (t − T)`` after.

Closed loop has ``concurrency`` users; each sends its next request when its previous
one ended plus a think time. Latency is measured from the intended time in both
modes: in a closed loop that is the end of the previous request plus think time.

Pure: randomness comes in as a ``numpy`` generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.bench.schedule.loads import Arrival, CancelSpec, Load, OpenLoop, TraceTimes
from kvroute.bench.workloads.base import BenchRequest
from kvroute.errors import UsageError


@dataclass(frozen=True, slots=True)
class Slot:
    """One request's place in a schedule. ``offset_s`` is its intended send time from
    the run's start (None in a closed loop, where it follows from the user's previous
    request); ``cancel_after_chunks`` abandons it after that many content chunks."""

    request_index: int
    offset_s: float | None
    think_s: float = 0.0
    cancel_after_chunks: int | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    load: Load
    slots: tuple[Slot, ...]

    @property
    def label(self) -> str:
        return self.load.label

    @property
    def scheduled_rate_per_s(self) -> float | None:
        """(n − 1) / (last − first intended offset); None for closed loops."""
        offsets = [s.offset_s for s in self.slots if s.offset_s is not None]
        if len(offsets) < 2 or offsets[-1] <= offsets[0]:
            return None
        return (len(offsets) - 1) / (max(offsets) - min(offsets))


def open_loop_offsets(num: int, load: OpenLoop, rng: np.random.Generator) -> np.ndarray:
    """``num`` intended send offsets (seconds, non-decreasing, first one at 0 without a
    ramp-up)."""
    if num == 0:
        return np.zeros(0)
    mean_gap = 1.0 / load.rate_per_s
    if load.arrival is Arrival.CONSTANT:
        gaps = np.full(num - 1, mean_gap)
    elif load.arrival is Arrival.GAMMA:
        gaps = rng.gamma(load.burstiness, mean_gap / load.burstiness, size=num - 1)
    else:
        gaps = rng.exponential(mean_gap, size=num - 1)
    u = np.concatenate(([0.0], np.cumsum(gaps)))
    if load.ramp_up_s > 0:
        u = u + mean_gap  # the first arrival at the operational time of one gap
        return _warp(u, load.ramp_up_s)
    return u


def _warp(u: np.ndarray, ramp_s: float) -> np.ndarray:
    """Map full-rate times ``u`` to ramped times: Λ(t)/R = u."""
    half = ramp_s / 2
    return np.where(u < half, np.sqrt(2 * ramp_s * np.maximum(u, 0.0)), u + half)


def build_schedule(
    requests: Sequence[BenchRequest],
    load: Load,
    rng: np.random.Generator,
    *,
    cancel: CancelSpec | None = None,
) -> Schedule:
    """A slot for every request, in request order. Raises :class:`UsageError` for
    :class:`TraceTimes` when a request has no ``arrival_s``."""
    n = len(requests)
    offsets: list[float | None]
    thinks = np.zeros(n)
    if isinstance(load, OpenLoop):
        offsets = [float(x) for x in open_loop_offsets(n, load, rng)]
    elif isinstance(load, TraceTimes):
        missing = [r.index for r in requests if r.arrival_s is None]
        if missing:
            raise UsageError(
                f"--schedule trace needs arrival times; request {missing[0]} has none",
                hint="use replay or synth workloads, or an open or closed loop",
            )
        offsets = [float(r.arrival_s) for r in requests if r.arrival_s is not None]
    else:
        offsets = [None] * n
        if load.think_s > 0:
            thinks = (
                rng.exponential(load.think_s, size=n)
                if load.exponential_think
                else np.full(n, load.think_s)
            )
    cancels: list[int | None] = [None] * n
    if cancel is not None and cancel.share > 0:
        picked = rng.random(n) < cancel.share
        after = rng.integers(cancel.after_min, cancel.after_max + 1, size=n)
        cancels = [int(a) if p else None for p, a in zip(picked, after, strict=True)]
    slots = tuple(
        Slot(
            request_index=i,
            offset_s=offsets[i],
            think_s=float(thinks[i]),
            cancel_after_chunks=cancels[i],
        )
        for i in range(n)
    )
    return Schedule(load=load, slots=slots)
