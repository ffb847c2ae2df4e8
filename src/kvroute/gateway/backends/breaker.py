"""A circuit breaker per backend: passive outlier detection on real traffic. Pure.

::

    CLOSED --failure_threshold consecutive failures--> OPEN
    OPEN   --open_s passed; one probe request let through--> HALF_OPEN
    HALF_OPEN --probe succeeds--> CLOSED      --probe fails--> OPEN (again open_s)

A failure is what says the backend, not the request, is at fault: no connection, a
reset, a timeout, 502/503/504. A refused connection opens the breaker at once (nothing
listens there). Time is passed in (``now_s``, monotonic seconds).

Every request sent ends in exactly one of :meth:`on_success`, :meth:`on_failure` or
:meth:`on_release` (it ended saying nothing about the backend: its client left, or an
answer such as a 500 that is about the request). The probe is released by all three,
else one unlucky probe would keep the backend out of rotation until a restart.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class BreakerState(enum.Enum):
    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


@dataclass(slots=True)
class CircuitBreaker:
    failure_threshold: int = 3
    open_s: float = 10.0
    state: BreakerState = BreakerState.CLOSED
    num_consecutive_failures: int = 0
    opened_at_s: float = 0.0
    probe_in_flight: bool = False
    num_opened: int = 0
    """How many times it opened (a metric)."""

    def allows(self, now_s: float) -> bool:
        """Whether a request may be sent now. Pure: :meth:`on_send` claims the probe."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return now_s - self.opened_at_s >= self.open_s
        return not self.probe_in_flight

    def on_send(self, now_s: float) -> bool:
        """A request is being sent; in OPEN past ``open_s`` it becomes the probe.
        Returns whether it is the probe (the caller hands that to :meth:`on_release`)."""
        if self.state is BreakerState.OPEN and now_s - self.opened_at_s >= self.open_s:
            self.state = BreakerState.HALF_OPEN
        if self.state is BreakerState.HALF_OPEN and not self.probe_in_flight:
            self.probe_in_flight = True
            return True
        return False

    def on_release(self, probe: bool) -> None:
        """The request ended with no verdict on the backend; if it was the probe, the
        next request may probe. Counts and state stay."""
        if probe:
            self.probe_in_flight = False

    def on_success(self) -> None:
        self.state = BreakerState.CLOSED
        self.num_consecutive_failures = 0
        self.probe_in_flight = False

    def on_failure(self, now_s: float, *, certain: bool = False) -> None:
        """Count a failure; ``certain`` (connection refused) opens at once."""
        self.num_consecutive_failures += 1
        self.probe_in_flight = False
        if (
            self.state is BreakerState.HALF_OPEN
            or certain
            or self.num_consecutive_failures >= self.failure_threshold
        ):
            if self.state is not BreakerState.OPEN:
                self.num_opened += 1
            self.state = BreakerState.OPEN
            self.opened_at_s = now_s
