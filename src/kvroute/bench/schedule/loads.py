"""What load a run puts on an endpoint: an open loop (a rate and an arrival process), a
closed loop (users and think time), or the trace's own times; mid-stream cancellation;
sweeps of rates or concurrencies. Plain validated values: :mod:`.build` turns one into
a schedule."""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
