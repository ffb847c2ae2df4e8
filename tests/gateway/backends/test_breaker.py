from __future__ import annotations

from kvroute.gateway.backends.breaker import BreakerState, CircuitBreaker


def test_opens_after_threshold_then_probes_once() -> None:
    b = CircuitBreaker(failure_threshold=2, open_s=10)
    b.on_failure(0.0)
    assert b.state is BreakerState.CLOSED and b.allows(0.0)
    b.on_failure(1.0)
    assert b.state is BreakerState.OPEN and not b.allows(5.0)
    assert b.allows(11.0)
    b.on_send(11.0)
    assert b.state is BreakerState.HALF_OPEN and not b.allows(11.0)  # one probe at a time
    b.on_failure(12.0)
    assert b.state is BreakerState.OPEN and not b.allows(21.0) and b.allows(22.0)
    b.on_send(22.0)
    b.on_success()
    assert b.state is BreakerState.CLOSED and b.num_opened == 2


def test_refused_connection_opens_at_once() -> None:
    b = CircuitBreaker(failure_threshold=5)
    b.on_failure(0.0, certain=True)
    assert b.state is BreakerState.OPEN


def test_success_resets_the_count() -> None:
    b = CircuitBreaker(failure_threshold=2)
    b.on_failure(0.0)
    b.on_success()
    b.on_failure(1.0)
    assert b.state is BreakerState.CLOSED


def test_release_frees_only_the_probe() -> None:
    b = CircuitBreaker(failure_threshold=1, open_s=1)
    assert not b.on_send(0.0)  # closed: not a probe
    b.on_failure(0.5)
    assert b.on_send(2.0) and not b.allows(2.0)  # the probe
    assert not b.on_send(2.0)  # a straggler sent meanwhile is no second probe
    b.on_release(False)
    assert not b.allows(2.1)
    b.on_release(True)
    assert b.state is BreakerState.HALF_OPEN and b.allows(2.1)
