from __future__ import annotations

import asyncio

import pytest

from kvroute.gateway.errors import GatewayError
from kvroute.gateway.limits import AdmissionGate, KeyLimiter, TokenBucket


def test_bucket_refills_per_minute() -> None:
    b = TokenBucket.per_minute(60, 0.0)
    for _ in range(60):
        assert b.try_take(1, 0.0) is None
    assert b.try_take(1, 0.0) == pytest.approx(1.0)
    assert b.try_take(1, 1.0) is None


def test_token_debt_blocks_until_repaid() -> None:
    limiter = KeyLimiter(requests=None, tokens=TokenBucket.per_minute(600, 0.0))
    assert limiter.admit(0.0) is None
    limiter.charge_tokens(900, 0.0)  # one big request overshoots
    refused = limiter.admit(0.0)
    assert refused is not None and refused.status == 429
    assert refused.retry_after_s == pytest.approx(30.0, abs=0.01)
    assert limiter.admit(30.1) is None


def test_gate_queues_then_refuses() -> None:
    async def scenario() -> None:
        gate = AdmissionGate(max_in_flight=1, max_queue=1, queue_timeout_s=0.2)
        await gate.acquire()
        waiter = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0)
        assert gate.num_queued == 1
        with pytest.raises(GatewayError) as full:
            await gate.acquire()
        assert full.value.status == 503 and full.value.retry_after_s == 1.0
        gate.release()
        await waiter
        assert gate.num_in_flight == 1 and gate.num_queued == 0
        with pytest.raises(GatewayError, match="no capacity within"):
            await gate.acquire()
        gate.release()
        assert gate.num_in_flight == 0

    asyncio.run(scenario())


def test_cancelled_waiter_gives_its_place_back() -> None:
    async def scenario() -> None:
        gate = AdmissionGate(max_in_flight=1, max_queue=4, queue_timeout_s=5)
        await gate.acquire()
        waiter = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        gate.release()  # hands the place to the waiter that is just leaving
        await asyncio.gather(waiter, return_exceptions=True)
        assert gate.num_in_flight == 0 and gate.num_queued == 0

    asyncio.run(scenario())
