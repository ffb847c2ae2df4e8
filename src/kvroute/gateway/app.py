"""The gateway: endpoints, the middleware stack, reload, start and stop.

Endpoints::

    POST /v1/chat/completions, /v1/completions   classified, routed, forwarded
    GET  /v1/models                              models the gateway serves (per key)
    GET  /health                                 liveness: the process answers
    GET  /ready                                  readiness: a backend is available, not draining
    GET  /metrics                                Prometheus text
    POST /admin/reload                           re-read the config file (admin key)
    GET  /admin/backends                         backend health, breaker, load (admin key)

All state derived from the config sits in one :class:`GatewayState`, replaced whole
on :meth:`Gateway.reload`; nothing is module-level.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from kvroute.errors import InputError
from kvroute.gateway.auth import check_admin, check_model
from kvroute.gateway.backends import (
    AdapterFactory,
    Backend,
    HealthChecker,
    TransportFactory,
    adapter_factory,
    pooled_transport,
)
from kvroute.gateway.cache_routing import CacheRouter
from kvroute.gateway.capture import TraceCapture, capture_event
from kvroute.gateway.classify import PrefixOracle, classify
from kvroute.gateway.config import GatewayConfig, load_config
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.limits import AdmissionGate
from kvroute.gateway.metrics import GatewayMetrics
from kvroute.gateway.middleware import (
    AdmissionMiddleware,
    AuthMiddleware,
    ErrorsMiddleware,
    ObserveMiddleware,
    RateLimitMiddleware,
)
from kvroute.gateway.policies.base import PickInput
from kvroute.gateway.policies.registry import CACHE_AWARE
from kvroute.gateway.prepare import Endpoint, parse_body, upstream_body
from kvroute.gateway.prompt_tokens import PromptTokens
from kvroute.gateway.proxy import Forward, Proxy
from kvroute.gateway.routing import Route, candidates, order_backends, select_route
from kvroute.gateway.server import HttpServer, ServerLimits
from kvroute.gateway.state import GatewayState, build_state
from kvroute.gateway.types import Handler, Request, Response, json_response
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer

ACCESS_LOGGER = "kvroute.gateway.access"
_ENDPOINTS = {e.value: e for e in Endpoint}


class Gateway:
    """One gateway over the backends of ``config``.

    ``transport_factory`` and ``adapter_factory`` are the network seams (tests pass
    their own); ``rng`` and ``clock`` make routing reproducible.
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        config_path: Path | None = None,
        transport_factory: TransportFactory = pooled_transport,
        make_adapter: AdapterFactory | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        oracle: PrefixOracle | None = None,
        wall_clock: Callable[[], float] = time.time,
        load: Callable[[str | None], ChatTokenizer] = load_tokenizer,
    ) -> None:
        self.config_path = config_path
        self.metrics = GatewayMetrics()
        self.clock = clock
        self.wall_clock = wall_clock
        self.rng = rng or random.Random()
        self.oracle = oracle
        self.logger = logging.getLogger("kvroute.gateway")
        self._transport_factory = transport_factory
        self._http = httpx.AsyncClient()
        self._adapter_factory = make_adapter or adapter_factory(self._http)
        self._state, _ = build_state(
            config,
            None,
            make_transport=transport_factory,
            make_adapter=self._adapter_factory,
            now_s=clock(),
        )
        limits = config.limits
        self.gate = AdmissionGate(limits.max_in_flight, limits.max_queue, limits.queue_timeout_s)
        self.proxy = Proxy(
            self.metrics, lambda: self._state.config.retry, rng=self.rng, clock=clock
        )
        self.health = HealthChecker(lambda: self._state.backends, lambda: self._state.config.health)
        self.handler: Handler = self._stack()
        self.server: HttpServer | None = None
        self._retired: list[Backend] = []
        # Capture settings apply at start; a reload does not restart the writer.
        self._load = load
        self.capture = (
            TraceCapture(
                replace(config.capture, tokenizer=config.capture.tokenizer or config.tokenizer),
                load=load,
                wall_clock=wall_clock,
            )
            if config.capture.enabled
            else None
        )
        self.cache_router: CacheRouter | None = None

    @property
    def state(self) -> GatewayState:
        return self._state

    def _stack(self) -> Handler:
        app: Handler = self._endpoints
        app = AdmissionMiddleware(app, self.gate)
        app = RateLimitMiddleware(app, lambda: self._state, self.clock)
        app = AuthMiddleware(app, lambda: self._state)
        app = ErrorsMiddleware(app, self.logger)
        return ObserveMiddleware(
            app,
            self.metrics,
            logging.getLogger(ACCESS_LOGGER),
            self.clock,
            lambda: self._state.config.listener.access_log,
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, host: str | None = None, port: int | None = None) -> int:
        """Listen (default: the config's listener) and start health checks; returns the
        port (useful with port 0)."""
        listener = self._state.config.listener
        if self.capture is not None:
            await asyncio.to_thread(self.capture.start)
        if _needs_cache_router(self._state.config):
            tokenizer = await asyncio.to_thread(self._load, self._state.config.tokenizer or None)
            self.cache_router = CacheRouter(PromptTokens(tokenizer), self.logger)
        self.server = HttpServer(
            self.handler,
            ServerLimits(max_body_bytes=listener.max_body_bytes),
            on_rejected=lambda status: self.metrics.errors.inc(
                ("body_too_large" if status == 413 else "bad_request",)
            ),
        )
        await self.server.start(host or listener.host, listener.port if port is None else port)
        self.health.start()
        return self.server.port

    async def stop(self, drain_timeout_s: float | None = None) -> int:
        """Graceful stop: refuse new connections, let streams in progress finish (up to
        the drain timeout), then close everything. Returns how many requests were cut."""
        cut = 0
        if self.server is not None:
            timeout = self._state.config.listener.drain_timeout_s
            cut = await self.server.shutdown(
                timeout if drain_timeout_s is None else drain_timeout_s
            )
        await self.health.stop()
        if self.capture is not None:
            await asyncio.to_thread(self.capture.close)  # every answered request is queued
        for backend in (*self._state.backends, *self._retired):
            await backend.transport.aclose()
        await self._http.aclose()
        return cut

    def reload(self, config: GatewayConfig) -> None:
        """Swap in ``config``. Requests in flight finish on what they started with."""
        self._state, retired = build_state(
            config,
            self._state,
            make_transport=self._transport_factory,
            make_adapter=self._adapter_factory,
            now_s=self.clock(),
        )
        limits = config.limits
        self.gate.resize(limits.max_in_flight, limits.max_queue, limits.queue_timeout_s)
        if self.cache_router is None and _needs_cache_router(config):
            # Rare (a reload adds the first cache_aware route): load here, blocking once.
            self.cache_router = CacheRouter(
                PromptTokens(self._load(config.tokenizer or None)), self.logger
            )
        self._retired.extend(retired)
        self._close_idle_retired()
        self.metrics.reloads.inc(("ok",))

    def reload_from_file(self) -> None:
        """Re-read ``config_path``; on error keep the running config and raise."""
        if self.config_path is None:
            raise InputError("this gateway was started without --config; nothing to reload")
        try:
            config = load_config(self.config_path)
        except InputError:
            self.metrics.reloads.inc(("error",))
            raise
        self.reload(config)

    def _close_idle_retired(self) -> None:
        keep: list[Backend] = []
        for backend in self._retired:
            if backend.num_outstanding:
                keep.append(backend)
            else:
                asyncio.get_running_loop().create_task(backend.transport.aclose())
        self._retired = keep

    # -- endpoints ----------------------------------------------------------------------

    async def _endpoints(self, request: Request) -> Response:
        path, method = request.path, request.method
        endpoint = _ENDPOINTS.get(path)
        if endpoint is not None:
            _require(method, "POST")
            return await self._complete(request, endpoint)
        if path == "/v1/models":
            _require(method, "GET")
            return self._models(request)
        if path == "/health":
            return json_response(200, {"status": "ok"})
        if path == "/ready":
            return self._ready()
        if path == "/metrics":
            body = self.metrics.exposition(lambda: self._state.backends, self.gate, self.capture)
            return Response(200, [("content-type", "text/plain; version=0.0.4")], body)
        if path.startswith("/admin/"):
            return self._admin(request)
        raise GatewayError(
            f"no such endpoint: {method} {path}",
            status=404,
            error_type="invalid_request_error",
            kind="not_found",
            code="not_found",
        )

    async def _complete(self, request: Request, endpoint: Endpoint) -> Response:
        state, ctx = self._state, request.ctx
        body = parse_body(request.body, endpoint)
        ctx.model, ctx.stream = body.model, body.stream
        check_model(state.keys_by_name.get(ctx.key_name), body.model)
        label = classify(
            body.data,
            is_chat=endpoint is Endpoint.CHAT,
            options=state.config.classify,
            oracle=self.oracle,
        )
        ctx.workload, ctx.workload_reason = label.workload, label.reason
        route = select_route(state.routes, body.model, label.workload)
        ctx.route, ctx.pool, ctx.policy = route.config.name, route.config.pool, route.config.policy
        model = route.config.upstream_model or body.model
        available = candidates(route, state.backends, model, self.clock())
        session_key = self._session_key(request, body.data)
        ordered, finish = self._order(request, route, available, body.data, session_key)
        inject = body.stream and not body.wants_usage
        try:
            response = await self.proxy.forward(
                Forward(
                    request=request,
                    body=body,
                    payload=upstream_body(
                        body, inject_usage=inject, model=route.config.upstream_model
                    ),
                    backends=ordered,
                    strip_usage=inject,
                    route_headers=state.config.listener.route_headers,
                )
            )
        except BaseException:
            if finish is not None:
                finish(0)
            raise
        self._when_done(request, response, body.data, session_key, finish)
        return response

    def _order(
        self,
        request: Request,
        route: Route,
        available: list[Backend],
        data: dict[str, Any],
        session_key: str | None,
    ) -> tuple[list[Backend], Callable[[int], None] | None]:
        """The policy's order of ``available``; on a cache_aware route also the
        function that records the request's end in the chosen backend's cache view."""
        router = self.cache_router if route.config.policy == CACHE_AWARE else None
        prediction = router.predict(data, available, session_key) if router is not None else None
        pick = PickInput(
            rng=self.rng,
            sequence=route.next_sequence(),
            session_key=session_key,
            workload=request.ctx.workload,
            prompt_tokens=prediction.num_tokens if prediction is not None else 0,
        )
        hits = prediction.hits if prediction is not None else None
        ordered = order_backends(route, available, pick, hits)
        if router is None or prediction is None:
            return ordered, None
        request.ctx.route_detail = prediction.explain(available, ordered[0])
        return ordered, router.start(prediction, available, ordered[0], data)

    def _when_done(
        self,
        request: Request,
        response: Response,
        data: dict[str, Any],
        session_key: str | None,
        finish: Callable[[int], None] | None,
    ) -> None:
        """What runs once the answer is complete: the cache view, then capture."""
        ctx = request.ctx
        if finish is not None:
            done = finish
            response.closers.append(lambda: done(ctx.completion_tokens or 0))
        capture = self.capture
        if capture is not None:
            response.closers.append(
                lambda: capture.submit(
                    capture_event(
                        request, data, session_key, response.status, self.clock, self.wall_clock
                    )
                )
            )

    def _session_key(self, request: Request, data: dict[str, object]) -> str | None:
        session = self._state.config.session
        value = request.headers.get(session.header)
        if value:
            return value
        user = data.get("user") if session.use_user_field else None
        return user if isinstance(user, str) and user else None

    def _models(self, request: Request) -> Response:
        state = self._state
        key = state.keys_by_name.get(request.ctx.key_name)
        names: dict[str, str] = {}
        for backend in state.backends:
            for model in backend.models:
                names.setdefault(model, backend.config.engine)
        for route in state.routes:
            for pattern in route.config.models:
                if not any(ch in pattern for ch in "*?["):
                    names.setdefault(pattern, "kvroute")
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": owner}
            for name, owner in sorted(names.items())
            if key is None or key.allows(name)
        ]
        return json_response(200, {"object": "list", "data": data})

    def _ready(self) -> Response:
        now = self.clock()
        up = [b.name for b in self._state.backends if b.available(now)]
        draining = self.server is not None and self.server.draining
        ready = bool(up) and not draining
        return json_response(
            200 if ready else 503,
            {
                "status": "ready" if ready else "not ready",
                "backends_available": up,
                "draining": draining,
            },
        )

    def _admin(self, request: Request) -> Response:
        check_admin(request.headers, self._state.config.admin_key_sha256)
        if request.path == "/admin/reload":
            _require(request.method, "POST")
            try:
                self.reload_from_file()
            except InputError as exc:
                raise GatewayError(
                    f"reload failed, the running config stays: {exc}",
                    status=400,
                    error_type="invalid_request_error",
                    kind="bad_config",
                    code="invalid_config",
                ) from None
            return json_response(200, {"status": "reloaded", "backends": len(self._state.backends)})
        if request.path == "/admin/backends":
            _require(request.method, "GET")
            now = self.clock()
            return json_response(
                200, {"backends": [_describe(b, now) for b in self._state.backends]}
            )
        raise GatewayError(
            f"no such admin endpoint: {request.path}",
            status=404,
            error_type="invalid_request_error",
            kind="not_found",
            code="not_found",
        )


def _needs_cache_router(config: GatewayConfig) -> bool:
    return any(r.policy == CACHE_AWARE for r in config.routes)


def _require(method: str, wanted: str) -> None:
    if method != wanted:
        raise GatewayError(
            f"method {method} not allowed here (use {wanted})",
            status=405,
            error_type="invalid_request_error",
            kind="bad_request",
            code="method_not_allowed",
        )


def _describe(backend: Backend, now_s: float) -> dict[str, object]:
    c = backend.config
    return {
        "name": c.name,
        "url": c.url,
        "engine": c.engine,
        "pool": c.pool,
        "models": list(backend.models),
        "healthy": backend.healthy,
        "health_detail": backend.health_detail,
        "breaker": backend.breaker.state.name.lower(),
        "available": backend.available(now_s),
        "outstanding": backend.num_outstanding,
    }
