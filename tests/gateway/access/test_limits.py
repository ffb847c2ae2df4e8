from __future__ import annotations

import asyncio

import pytest

from kvroute.gateway.access.limits import AdmissionGate, KeyLimiter, TokenBucket, estimate_tokens
from kvroute.gateway.errors import GatewayError


def test_bucket_refills_per_minute() -> None:
    b = TokenBucket.per_minute(60, 0.0)
    for _ in range(60):
        assert b.try_take(1, 0.0) is None
    assert b.try_take(1, 0.0) == pytest.approx(1.0)
    assert b.try_take(1, 1.0) is None


def test_token_debt_blocks_until_repaid() -> None:
    limiter = KeyLimiter(requests=None, tokens=TokenBucket.per_minute(600, 0.0))
    assert limiter.admit(0.0) is None
    limiter.settle_tokens(900, 0, 0.0)  # one big request overshoots
    refused = limiter.admit(0.0)
    assert refused is not None and refused.status == 429
    assert refused.retry_after_s == pytest.approx(30.0, abs=0.01)
    assert limiter.admit(30.1) is None


def test_reservations_hold_under_concurrency_and_settle() -> None:
    limiter = KeyLimiter(requests=None, tokens=TokenBucket.per_minute(50, 0.0))
    admitted = [limiter.admit(0.0, 30) is None for _ in range(30)]  # all at once
    assert admitted == [True, True] + [False] * 28  # the second goes into debt, no more
    limiter.settle_tokens(10, 30, 0.0)  # each used 10 of the 30 it reserved
    limiter.settle_tokens(10, 30, 0.0)
    assert limiter.tokens is not None and limiter.tokens.level == pytest.approx(30.0)
    limiter.settle_tokens(0, 500, 0.0)  # a refund never lifts it past its capacity
    assert limiter.tokens.level == 50.0


def test_estimate_is_max_tokens_or_the_default_plus_the_prompt() -> None:
    assert estimate_tokens({"max_tokens": 20}, 400, 512) == 120
    assert estimate_tokens({"max_completion_tokens": 7, "max_tokens": 20}, 0, 512) == 7
    assert estimate_tokens({"max_tokens": "20"}, 0, 512) == 512
    assert estimate_tokens(None, 40, 512) == 522


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
