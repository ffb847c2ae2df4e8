"""Per-key rate limits (token buckets) and the admission gate (bounded concurrency
with a bounded queue).

Rate limits count requests and tokens per minute. A bucket holds up to one minute's
allowance and refills continuously. Tokens are known only when a request ends
(``usage``), so a request is admitted while the key's token bucket is not in debt and
reserves an estimate at once (:func:`estimate_tokens`); when it ends the reservation
is settled against its real usage (the difference charged or given back). Concurrent
requests therefore see each other's reservations: a key overshoots by at most one
request's estimate, however many it sends at once. The buckets are pure: time is
passed in.

The admission gate lets ``max_in_flight`` requests run and up to ``max_queue`` wait
(first come, first served); when the queue is full it answers at once with 503 and
``Retry-After``, and a request that waited ``queue_timeout_s`` gets the same.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvroute.gateway.errors import GatewayError


@dataclass(slots=True)
class TokenBucket:
    """``capacity`` units, refilled at ``capacity / 60`` per second."""

    capacity: float
    level: float
    updated_s: float

    @staticmethod
    def per_minute(limit: int, now_s: float) -> TokenBucket:
        return TokenBucket(float(limit), float(limit), now_s)

    def _refill(self, now_s: float) -> None:
        elapsed = max(0.0, now_s - self.updated_s)
        self.level = min(self.capacity, self.level + elapsed * self.capacity / 60.0)
        self.updated_s = now_s

    def try_take(self, amount: float, now_s: float) -> float | None:
        """Take ``amount`` if there is that much: None. Else the seconds until there is."""
        self._refill(now_s)
        if self.level >= amount:
            self.level -= amount
            return None
        return (amount - self.level) * 60.0 / self.capacity

    def wait_until_positive_s(self, now_s: float) -> float | None:
        """None when not in debt (level > 0); else the seconds until it is not."""
        self._refill(now_s)
        if self.level > 0:
            return None
        return (1e-9 - self.level) * 60.0 / self.capacity

    def charge(self, amount: float, now_s: float) -> None:
        """Take ``amount`` unconditionally (the level may go negative: debt); a negative
        amount gives back, up to the capacity."""
        self._refill(now_s)
        self.level = min(self.capacity, self.level - amount)


@dataclass(slots=True)
class KeyLimiter:
    """One key's request and token buckets (either may be absent: no limit)."""

    requests: TokenBucket | None
    tokens: TokenBucket | None

    def admit(self, now_s: float, reserve_tokens: int = 0) -> GatewayError | None:
        """None when a request may go now (``reserve_tokens`` then taken from the token
        bucket, which may go into debt), else the 429 to answer."""
        if self.tokens is not None:
            wait = self.tokens.wait_until_positive_s(now_s)
            if wait is not None:
                return _rate_limited("tokens per minute", wait)
        if self.requests is not None:
            wait = self.requests.try_take(1.0, now_s)
            if wait is not None:
                return _rate_limited("requests per minute", wait)
        if self.tokens is not None and reserve_tokens > 0:
            self.tokens.charge(float(reserve_tokens), now_s)
        return None

    def settle_tokens(self, num_used: int, num_reserved: int, now_s: float) -> None:
        """A request that reserved ``num_reserved`` at admission used ``num_used``."""
        if self.tokens is not None and num_used != num_reserved:
            self.tokens.charge(float(num_used - num_reserved), now_s)


def estimate_tokens(body: Mapping[str, Any] | None, body_len: int, default_max_tokens: int) -> int:
    """What a request may use: its ``max_tokens`` (or ``max_completion_tokens``, else
    ``default_max_tokens``) plus its prompt at ~4 bytes a token of the body, which
    errs high (JSON quoting and field names count too) and is settled at the end."""
    wanted = None
    if body is not None:
        for name in ("max_completion_tokens", "max_tokens"):
            value = body.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                wanted = value
                break
    return (wanted or default_max_tokens) + body_len // 4


def _rate_limited(what: str, wait_s: float) -> GatewayError:
    return GatewayError(
        f"rate limit reached for {what}; retry after {wait_s:.1f} s",
        status=429,
        error_type="rate_limit_error",
        kind="rate_limited",
        code="rate_limit_exceeded",
        retry_after_s=wait_s,
    )


class AdmissionGate:
    """At most ``max_in_flight`` holders; up to ``max_queue`` waiters, FIFO.

    Resizable in place (config reload): raising the limit admits waiters at once,
    lowering it lets holders finish.
    """

    def __init__(self, max_in_flight: int, max_queue: int, queue_timeout_s: float) -> None:
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.num_in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def num_queued(self) -> int:
        return len(self._waiters)

    def resize(self, max_in_flight: int, max_queue: int, queue_timeout_s: float) -> None:
        self.max_in_flight, self.max_queue = max_in_flight, max_queue
        self.queue_timeout_s = queue_timeout_s
        self._wake()

    async def acquire(self) -> None:
        """Wait for a place; raise the 503 :class:`GatewayError` when full or timed out."""
        if self.num_in_flight < self.max_in_flight and not self._waiters:
            self.num_in_flight += 1
            return
        if len(self._waiters) >= self.max_queue:
            raise _overloaded("the gateway's queue is full", 1.0)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.queue_timeout_s)
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                return  # granted just as the wait ran out: keep the place
            fut.cancel()
            raise _overloaded(
                f"no capacity within {self.queue_timeout_s:g} s", self.queue_timeout_s
            ) from None
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted, but the client left: pass the place on
            else:
                fut.cancel()
            raise
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    def release(self) -> None:
        self.num_in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.num_in_flight < self.max_in_flight:
            fut = self._waiters.popleft()
            if not fut.done():
                self.num_in_flight += 1
                fut.set_result(None)


def _overloaded(message: str, retry_after_s: float) -> GatewayError:
    return GatewayError(
        message,
        status=503,
        error_type="server_error",
        kind="overloaded",
        code="overloaded",
        retry_after_s=retry_after_s,
    )
