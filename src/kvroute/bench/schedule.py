"""When each request is meant to be sent: open loop, closed loop, replayed times, sweeps.

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

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.bench.workloads.base import BenchRequest
from kvroute.errors import UsageError


class Arrival(enum.Enum):
    POISSON = "poisson"
    GAMMA = "gamma"
    CONSTANT = "constant"


@dataclass(frozen=True, slots=True)
class OpenLoop:
    rate_per_s: float
    arrival: Arrival = Arrival.POISSON
    burstiness: float = 1.0
    """Gamma shape *k* (used with :attr:`Arrival.GAMMA`); 1 is Poisson."""
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0:
            raise UsageError(f"rate must be > 0 requests/s, got {self.rate_per_s}")
        if not self.burstiness > 0:
            raise UsageError(f"burstiness (gamma shape) must be > 0, got {self.burstiness}")
        if self.ramp_up_s < 0:
            raise UsageError(f"ramp-up must be ≥ 0 s, got {self.ramp_up_s}")

    @property
    def label(self) -> str:
        return f"rate={self.rate_per_s:g}/s"


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    concurrency: int
    think_s: float = 0.0
    """Mean think time between a user's answer and its next request."""
    exponential_think: bool = False
    """Draw think times from an exponential with mean ``think_s`` (else constant)."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise UsageError(f"concurrency must be ≥ 1, got {self.concurrency}")
        if self.think_s < 0:
            raise UsageError(f"think time must be ≥ 0 s, got {self.think_s}")

    @property
    def label(self) -> str:
        return f"concurrency={self.concurrency}"


@dataclass(frozen=True, slots=True)
class TraceTimes:
    """Send at the requests' own ``arrival_s`` (replay, synth)."""

    @property
    def label(self) -> str:
        return "trace times"


Load = OpenLoop | ClosedLoop | TraceTimes


@dataclass(frozen=True, slots=True)
class CancelSpec:
    """Abandon ``share`` of the requests mid-stream, after a number of content chunks
    drawn uniformly from ``[after_min, after_max]``."""

    share: float
    after_min: int = 1
    after_max: int = 8

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise UsageError(f"cancel share must be in [0, 1], got {self.share}")
        if not 1 <= self.after_min <= self.after_max:
            raise UsageError("cancel after: need 1 ≤ min ≤ max chunks")


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


def parse_sweep(spec: str) -> list[float]:
    """``"1,2,4"`` or a geometric range ``"1:16:x2"`` / arithmetic ``"10:50:+10"``."""
    spec = spec.strip()
    try:
        if ":" not in spec:
            values = [float(v) for v in spec.split(",") if v.strip()]
        else:
            lo_s, hi_s, step_s = spec.split(":")
            lo, hi = float(lo_s), float(hi_s)
            values = []
            v = lo
            if step_s.startswith("x"):
                factor = float(step_s[1:])
                if factor <= 1:
                    raise ValueError("factor must be > 1")
                while v <= hi * (1 + 1e-9):
                    values.append(v)
                    v *= factor
            else:
                step = float(step_s.lstrip("+"))
                if step <= 0:
                    raise ValueError("step must be > 0")
                while v <= hi + 1e-9:
                    values.append(v)
                    v += step
    except ValueError as exc:
        raise UsageError(
            f"bad sweep {spec!r}: {exc}", hint="e.g. 5,10,20 or 1:64:x2 or 10:50:+10"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"bad sweep {spec!r}: values must be > 0")
    return values
