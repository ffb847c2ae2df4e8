"""Forwarding one completion request: attempts, failover, timeouts, pass-through.

Nothing reaches the client until the chosen backend has sent its first body bytes,
so every failure before that (refused connection, reset, 502/503/504, first-token
timeout) is retried on the next backend in the policy's order, with a short jittered
backoff, up to ``max_attempts``. After the first byte the response is committed: a
failure then ends the stream with a terminal SSE error event (the OpenAI SDK raises
on it) and counts against the backend's breaker.

Timeouts (per backend): ``connect_s``; ``first_token_s`` until the first body bytes
of a stream, or the head of a non-streamed answer (both fail over); ``idle_s`` between
two pieces of a stream in progress; ``total_s`` for the whole request, from the
moment the gateway received it. A stream cut by one ends with a terminal error event
and a warning in the log.

A client that goes away cancels its task; the upstream connection is aborted then and
there, even while a non-streamed answer is still being generated, so an engine that
watches its socket stops (vLLM always; llama-server only for streams).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kvroute.errors import EngineError
from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.config.gateway import RetryConfig
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.ops.metrics import GatewayMetrics
from kvroute.gateway.proxy.prepare import ClientBody
from kvroute.gateway.proxy.sse_relay import SseRelay
from kvroute.gateway.types import GatewayRequest
from kvroute.http.client import Exchange, FailureKind, UpstreamFailure, UpstreamRequest
from kvroute.http.messages import BodySink, Response, sse_error_event

RETRYABLE_STATUSES = frozenset({502, 503, 504})
MAX_UPSTREAM_BODY_BYTES = 64 * 1024 * 1024
"""A non-streamed answer larger than this is a failure (no completion comes near it)."""
_PASSED_HEADERS = ("content-type",)


@dataclass(frozen=True, slots=True)
class Forward:
    """One request to forward: the client's, its parsed body, the bytes to send and
    the backends to try in order."""

    request: GatewayRequest
    body: ClientBody
    payload: bytes
    backends: list[Backend]
    strip_usage: bool
    route_headers: bool
    route_detail: str
    """Why these backends (``x-kvroute-route``, when ``route_headers``)."""
    retry: RetryConfig


class _Flow:
    """The bookkeeping of a committed response: ends exactly once, whether the stream
    finished, failed, or was abandoned by a client that left."""

    __slots__ = ("backend", "done", "exchange", "probe", "proxy", "request")

    def __init__(
        self,
        proxy: Proxy,
        request: GatewayRequest,
        backend: Backend,
        exchange: Exchange,
        probe: bool,
    ) -> None:
        self.proxy, self.request, self.backend, self.exchange = proxy, request, backend, exchange
        self.probe = probe
        self.done = False

    def end(self, failure: UpstreamFailure | None = None, *, abandoned: bool = False) -> None:
        if self.done:
            return
        self.done = True
        self.backend.num_outstanding -= 1
        now = self.proxy.clock()
        ctx = self.request.ctx
        ctx.e2e_s = now - self.request.received_s
        if failure is not None:
            self.proxy.record_failure(self.backend, failure, now)
            ctx.error_kind = f"upstream_{failure.kind.value}"
        elif abandoned:
            self.exchange.abort()
            ctx.error_kind = "client_disconnect"
            self.backend.breaker.on_release(self.probe)
        else:
            self.backend.breaker.on_success()


class Proxy:
    """Sends requests to backends. Clock, sleep and randomness are passed in."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        *,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.metrics = metrics
        self.logger = logging.getLogger("kvroute.gateway")
        self.rng = rng
        self.clock = clock
        self._sleep = sleep

    async def forward(self, fwd: Forward) -> Response:
        """The response from the first backend that answers; raises
        :class:`GatewayError` (502/503/504) when every attempt failed."""
        retry = fwd.retry
        ctx = fwd.request.ctx
        last: UpstreamFailure | None = None
        tried = 0
        for backend in _cycle(fwd.backends, retry.max_attempts):
            now = self.clock()
            if tried and not backend.available(now):
                continue
            if tried:
                self.metrics.retries.inc((backend.name,))
                await self._sleep(self._backoff_s(retry, tried))
            tried += 1
            ctx.attempts = tried
            ctx.backend, ctx.pool = backend.name, backend.config.pool
            try:
                return await self._attempt(fwd, backend)
            except UpstreamFailure as exc:
                last = exc
        if last is None:
            raise GatewayError(
                "no backend available",
                status=503,
                error_type="server_error",
                kind="no_backend",
                code="no_healthy_backend",
                retry_after_s=1.0,
            )
        timeout = last.kind in (FailureKind.FIRST_BYTE_TIMEOUT, FailureKind.TOTAL_TIMEOUT)
        raise GatewayError(
            f"upstream {'timed out' if timeout else 'failed'} after {tried} attempt(s): {last}",
            status=504 if timeout else 502,
            error_type="server_error",
            kind=f"upstream_{last.kind.value}",
            code="upstream_error",
        )

    def _backoff_s(self, retry: RetryConfig, num_tried: int) -> float:
        cap = min(retry.max_backoff_s, retry.backoff_s * 2.0 ** (num_tried - 1))
        return float(cap * (0.5 + 0.5 * self.rng.random()))

    def record_failure(self, backend: Backend, failure: UpstreamFailure, now_s: float) -> None:
        certain = failure.kind is FailureKind.CONNECT and "refused" in failure.detail.lower()
        backend.breaker.on_failure(now_s, certain=certain)
        self.metrics.upstream_failures.inc((backend.name, failure.kind.value))

    async def _attempt(self, fwd: Forward, backend: Backend) -> Response:
        request, timeouts = fwd.request, backend.config.timeouts
        deadline = request.received_s + timeouts.total_s
        stream = fwd.body.stream
        headers = [("content-type", "application/json"), ("x-request-id", request.request_id)]
        if stream:
            headers.append(("accept", "text/event-stream"))
        if backend.config.api_key:
            headers.append(("authorization", f"Bearer {backend.config.api_key}"))
        upstream = UpstreamRequest("POST", request.path, tuple(headers), fwd.payload)
        now = self.clock()
        probe = backend.breaker.on_send(now)
        backend.num_outstanding += 1
        exchange: Exchange | None = None
        committed = False
        try:
            # A non-streamed answer has no head until it is generated: first_token_s
            # bounds that wait too, so a hung backend fails over instead of holding
            # the request for total_s.
            first_deadline = min(deadline, now + timeouts.first_token_s)
            exchange = await backend.transport.send(
                upstream,
                connect_timeout_s=timeouts.connect_s,
                head_timeout_s=max(0.001, first_deadline - self.clock()),
            )
            if exchange.status in RETRYABLE_STATUSES:
                detail = (await _read_all(exchange, deadline, self.clock))[:200]
                raise UpstreamFailure(
                    FailureKind.STATUS, f"HTTP {exchange.status}: {detail!r}", response_started=True
                )
            if stream and exchange.status == 200:
                first = await _read_first(exchange, first_deadline, self.clock)
                committed = True
                return self._stream_response(fwd, backend, exchange, first, deadline, probe)
            body = await _read_all(exchange, deadline, self.clock)
            committed = True
            return self._full_response(fwd, backend, exchange, body, probe)
        except UpstreamFailure as exc:
            backend.num_outstanding -= 1
            self.record_failure(backend, exc, self.clock())
            raise
        except BaseException:
            # The client left (cancelled) or a bug: no verdict on the backend.
            if not committed:
                backend.num_outstanding -= 1
                backend.breaker.on_release(probe)
                if exchange is not None:
                    exchange.abort()
            raise

    def _headers(self, fwd: Forward, backend: Backend, exchange: Exchange) -> list[tuple[str, str]]:
        headers = [(n, exchange.headers[n]) for n in _PASSED_HEADERS if n in exchange.headers]
        if fwd.route_headers:
            workload = fwd.request.ctx.workload
            headers.append(("x-kvroute-backend", backend.name))
            headers.append(("x-kvroute-class", workload.value if workload else ""))
            if fwd.route_detail:
                headers.append(("x-kvroute-route", fwd.route_detail))
        return headers

    def _full_response(
        self, fwd: Forward, backend: Backend, exchange: Exchange, body: bytes, probe: bool
    ) -> Response:
        ctx = fwd.request.ctx
        backend.num_outstanding -= 1
        ctx.e2e_s = self.clock() - fwd.request.received_s
        if exchange.status < 500:
            backend.breaker.on_success()  # it answered; a 4xx is the request's fault
        else:
            # A 500 is about this request as often as the backend: no verdict either way.
            backend.breaker.on_release(probe)
        if exchange.status == 200:
            try:
                decoded = orjson.loads(body)
            except orjson.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict):
                _read_usage(ctx_holder=fwd.request, backend=backend, event=decoded)
        else:
            ctx.error_kind = f"upstream_status_{exchange.status}"
        return Response(exchange.status, self._headers(fwd, backend, exchange), body)

    def _stream_response(
        self,
        fwd: Forward,
        backend: Backend,
        exchange: Exchange,
        first: bytes,
        deadline: float,
        probe: bool,
    ) -> Response:
        flow = _Flow(self, fwd.request, backend, exchange, probe)
        headers = self._headers(fwd, backend, exchange)
        headers += [("cache-control", "no-cache"), ("x-accel-buffering", "no")]
        stream = _RelayStream(flow, first, SseRelay(strip_usage=fwd.strip_usage), deadline)
        response = Response(200, headers, stream=stream)
        response.closers.append(lambda: flow.end(abandoned=True))
        return response


class _RelayStream:
    """A committed upstream stream, pushed to the client as its events complete.

    Upstream pieces go from the upstream socket's callback through the
    :class:`SseRelay` into the client's socket; back-pressure runs the other way
    (a full client socket pauses reading from the engine).
    """

    __slots__ = ("deadline", "first", "flow", "relay", "sink")

    def __init__(self, flow: _Flow, first: bytes, relay: SseRelay, deadline: float) -> None:
        self.flow, self.first, self.relay, self.deadline = flow, first, relay, deadline
        self.sink: BodySink | None = None

    def _on_data(self, data: bytes) -> None:
        out = self.relay.feed(data)
        sink = self.sink
        if not out or sink is None:
            return
        ctx = self.flow.request.ctx
        if ctx.ttft_s is None:
            ctx.ttft_s = self.flow.proxy.clock() - self.flow.request.received_s
        sink.write(out)
        if sink.paused:
            exchange = self.flow.exchange
            exchange.pause()
            sink.when_writable(exchange.resume)

    async def send_to(self, sink: BodySink) -> None:
        flow, relay = self.flow, self.relay
        self.sink = sink
        self._on_data(self.first)
        flow.exchange.attach(self._on_data)
        try:
            await flow.exchange.finished(
                max(0.001, self.deadline - flow.proxy.clock()), flow.backend.config.timeouts.idle_s
            )
        except UpstreamFailure as exc:
            flow.end(exc)
            flow.proxy.logger.warning(
                "stream %s from backend %s cut: %s",
                flow.request.request_id,
                flow.backend.name,
                exc,
            )
            sink.write(
                relay.finish()
                + sse_error_event(
                    f"the backend failed mid-stream ({exc.kind.value}); the answer is incomplete",
                    "server_error",
                    f"upstream_{exc.kind.value}",
                )
            )
            return
        sink.write(relay.finish())
        if relay.usage_event is not None:
            _read_usage(ctx_holder=flow.request, backend=flow.backend, event=relay.usage_event)
        flow.end()


def _cycle(backends: list[Backend], max_attempts: int) -> list[Backend]:
    """The order of attempts: down the policy's list, again from the top if attempts
    remain (a single backend is retried after its backoff)."""
    if not backends:
        return []
    return [backends[i % len(backends)] for i in range(max_attempts)]


async def _read_first(exchange: Exchange, deadline: float, clock: Callable[[], float]) -> bytes:
    while True:
        try:
            data = await exchange.read(max(0.001, deadline - clock()))
        except UpstreamFailure as exc:
            if exc.kind is FailureKind.TOTAL_TIMEOUT:
                raise UpstreamFailure(
                    FailureKind.FIRST_BYTE_TIMEOUT, "no first token in time", response_started=True
                ) from None
            raise
        if data is None:
            raise UpstreamFailure(FailureKind.RESET, "empty stream", response_started=True)
        if data:
            return data


async def _read_all(exchange: Exchange, deadline: float, clock: Callable[[], float]) -> bytes:
    """The whole body, up to :data:`MAX_UPSTREAM_BODY_BYTES` (past it the connection is
    aborted and the answer is a failure: a backend gone wrong must not fill memory)."""
    parts: list[bytes] = []
    num_bytes = 0
    while True:
        data = await exchange.read(max(0.001, deadline - clock()))
        if data is None:
            return b"".join(parts)
        num_bytes += len(data)
        if num_bytes > MAX_UPSTREAM_BODY_BYTES:
            exchange.abort()
            raise UpstreamFailure(
                FailureKind.MALFORMED,
                f"answer larger than {MAX_UPSTREAM_BODY_BYTES} bytes",
                response_started=True,
            )
        parts.append(data)


def _read_usage(*, ctx_holder: GatewayRequest, backend: Backend, event: Mapping[str, Any]) -> None:
    """Token counts from a response (or its usage chunk), cached tokens the way the
    backend's engine adapter reads them."""
    ctx = ctx_holder.ctx
    usage = event.get("usage")
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        ctx.prompt_tokens = prompt if isinstance(prompt, int) else None
        ctx.completion_tokens = completion if isinstance(completion, int) else None
    try:
        cache = backend.adapter.response_cache_usage(event)
    except EngineError:
        cache = None
    if cache is not None:
        ctx.cached_tokens = cache.cached_tokens
