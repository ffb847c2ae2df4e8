"""Engine times from a run as a client saw it (pure)."""

from __future__ import annotations

import pytest

from kvroute.validate.predict import engine_times
from kvroute.validate.result import Served


def _served(
    sent: float, done: float, slot: int | None = None, started: float | None = None
) -> Served:
    return Served(sent, done, sent if started is None else started, slot, 10, 0, 2, None, None)


def test_engine_times_order_one_steps_releases_by_slot_and_starts_by_send() -> None:
    served = [
        _served(0.0, 1.000, slot=3),
        _served(0.0, 1.004, slot=0),  # read 4 ms later: released in the same step, first
        _served(1.001, 2.0, started=1.10),
        _served(1.005, 2.5, started=1.09),  # sent later, so started no earlier
    ]
    start, end = engine_times(served, lead_s=0.02)
    assert end[1] < end[0] < start[2] < start[3]
    assert end[0] == pytest.approx(0.984) and end[1] == pytest.approx(0.98)


def test_engine_times_llamacpp_starts_requests_that_waited_newest_first() -> None:
    """Two slots, four requests at once: 2 and 3 wait; both slots free in one step, and
    llama.cpp moves each waiting request to the queue's front in turn: 3 starts first."""
    served = [
        _served(0.00, 1.0, slot=0),
        _served(0.05, 1.0, slot=1),
        _served(0.10, 2.0, started=1.01),
        _served(0.15, 2.0, started=1.00),
        _served(0.99, 2.0, started=1.005),  # sent after the releases: after the others
    ]
    start, _ = engine_times(served, lead_s=0.02, num_slots=2)
    assert start[3] < start[2] < start[4]
    start, _ = engine_times(served, lead_s=0.02)  # vLLM: first come, first served
    assert start[2] < start[3] < start[4]
