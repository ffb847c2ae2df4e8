"""The gateway's middlewares, outermost first, all of one shape (see kvroute.gateway.types).

``Observe`` records metrics and the access log line when the answer is done;
``Errors`` is the one place exceptions become OpenAI error JSON; ``Auth`` checks the
API key of ``/v1/`` requests; ``RateLimit`` applies the key's request and token
budgets; ``Admission`` bounds the completions in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from kvroute.gateway.access.limits import AdmissionGate, estimate_tokens
from kvroute.gateway.errors import GatewayError, error_response
from kvroute.gateway.ops.metrics import GatewayMetrics
from kvroute.gateway.state import GatewayState
from kvroute.gateway.types import GatewayHandler, GatewayRequest
from kvroute.http.messages import Response

COMPLETION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
CLIENT_CLOSED = 499
"""The status logged for a request whose client left before its answer began."""

StateRef = Callable[[], GatewayState]
Clock = Callable[[], float]


class ObserveMiddleware:
    """Metrics and the structured access log, once per request, at its very end.

    The log line has ids, route, timings and token counts; never prompt or completion
    text (nothing of the body is logged). It is one JSON object with the ``ts``,
    ``level`` and ``logger`` every line of the gateway's log stream has (logs.py).
    """

    def __init__(
        self,
        app: GatewayHandler,
        metrics: GatewayMetrics,
        logger: logging.Logger,
        clock: Clock,
        log_enabled: Callable[[], bool],
    ) -> None:
        self.app, self.metrics, self.logger, self.clock = app, metrics, logger, clock
        self.log_enabled = log_enabled

    async def __call__(self, request: GatewayRequest) -> Response:
        try:
            response = await self.app(request)
        except asyncio.CancelledError:
            # The client left before the answer began (a non-streamed request still
            # generating): logged and counted as 499, nginx's "client closed request".
            request.ctx.error_kind = request.ctx.error_kind or "client_disconnect"
            self._done(request, CLIENT_CLOSED)
            raise
        response.closers.append(lambda: self._done(request, response.status))
        return response

    def _done(self, request: GatewayRequest, status: int) -> None:
        ctx = request.ctx
        if ctx.e2e_s is None:
            ctx.e2e_s = self.clock() - request.received_s
        # Completions only: scrapes, model lists and status pages would be counted with
        # empty route labels and drown the traffic the counters are for.
        if request.path in COMPLETION_PATHS:
            self.metrics.observe(ctx, status)
        if self.log_enabled() and self.logger.isEnabledFor(logging.INFO):
            line = {
                "ts": round(time.time(), 3),
                "level": "info",
                "logger": self.logger.name,
                "request_id": request.request_id,
                "method": request.method,
                "path": request.path,
                "status": status,
                "client": request.client,
                "key": ctx.key_name or None,
                "model": ctx.model or None,
                "class": ctx.workload.value if ctx.workload else None,
                "class_reason": ctx.workload_reason or None,
                "route": ctx.route or None,
                "pool": ctx.pool or None,
                "policy": ctx.policy or None,
                "backend": ctx.backend or None,
                "attempts": ctx.attempts,
                "stream": ctx.stream,
                "ttft_ms": _ms(ctx.ttft_s),
                "e2e_ms": _ms(ctx.e2e_s),
                "prompt_tokens": ctx.prompt_tokens,
                "completion_tokens": ctx.completion_tokens,
                "cached_tokens": ctx.cached_tokens,
                "error": ctx.error_kind or None,
            }
            self.logger.info(orjson.dumps(line).decode())


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class ErrorsMiddleware:
    """:class:`GatewayError` → its status and OpenAI error JSON; anything else → a
    logged 500 (a gateway bug, never the client's input)."""

    def __init__(self, app: GatewayHandler, logger: logging.Logger) -> None:
        self.app, self.logger = app, logger

    async def __call__(self, request: GatewayRequest) -> Response:
        try:
            return await self.app(request)
        except GatewayError as exc:
            request.ctx.error_kind = exc.kind
            return error_response(exc)
        except Exception:
            self.logger.exception("internal error answering %s %s", request.method, request.path)
            request.ctx.error_kind = "internal"
            return error_response(
                GatewayError(
                    "internal gateway error",
                    status=500,
                    error_type="server_error",
                    kind="internal",
                )
            )


class AuthMiddleware:
    """``/v1/`` requests must present a configured key (unless none is configured)."""

    def __init__(self, app: GatewayHandler, state: StateRef) -> None:
        self.app, self.state = app, state

    async def __call__(self, request: GatewayRequest) -> Response:
        if request.path.startswith("/v1/"):
            key = self.state().keys.authenticate(request.headers)
            if key is not None:
                request.ctx.key_name = key.name
        return await self.app(request)


class RateLimitMiddleware:
    """Per-key requests/min before the request; tokens/min reserved at admission (an
    estimate, see limits.py) and settled against the real usage when it ends."""

    def __init__(self, app: GatewayHandler, state: StateRef, clock: Clock) -> None:
        self.app, self.state, self.clock = app, state, clock

    async def __call__(self, request: GatewayRequest) -> Response:
        name = request.ctx.key_name
        if not name or request.path not in COMPLETION_PATHS:
            return await self.app(request)
        state = self.state()
        limiter = state.limiters.get(name)
        if limiter is None:
            return await self.app(request)
        reserved = 0
        if limiter.tokens is not None:
            reserved = estimate_tokens(
                _json_object(request.body), len(request.body), state.config.limits.reserve_tokens
            )
        refused = limiter.admit(self.clock(), reserved)
        if refused is not None:
            raise refused
        ctx = request.ctx

        def settle() -> None:
            used = (ctx.prompt_tokens or 0) + (ctx.completion_tokens or 0)
            limiter.settle_tokens(used, reserved, self.clock())

        try:
            response = await self.app(request)
        except BaseException:
            settle()  # nothing was generated, or the client left: usage as far as known
            raise
        response.closers.append(settle)
        return response


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """The body as an object, or None (a bad body gets its 400 further in)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


class AdmissionMiddleware:
    """At most ``max_in_flight`` completions at once (streams until their end); the
    rest queue, boundedly."""

    def __init__(self, app: GatewayHandler, gate: AdmissionGate) -> None:
        self.app, self.gate = app, gate

    async def __call__(self, request: GatewayRequest) -> Response:
        if request.path not in COMPLETION_PATHS:
            return await self.app(request)
        await self.gate.acquire()
        try:
            response = await self.app(request)
        except BaseException:
            self.gate.release()
            raise
        response.closers.append(self.gate.release)
        return response
