"""The gateway: endpoints, the middleware stack, reload, start and stop.

Endpoints::

    POST /v1/chat/completions, /v1/completions   classified, routed, forwarded
    GET  /v1/models                              models the gateway serves (per key)
    GET  /health                                 liveness: the process answers
    GET  /ready                                  readiness: a backend is available, not draining
    GET  /metrics                                Prometheus text
    POST /admin/reload                           re-read the config file (admin key)
    GET  /admin/backends                         backend health, breaker, load (admin key)
    GET  /kvroute/rollout                        canary and shadow sides compared (JSON)
    GET  /kvroute/status                         live traffic shape (HTML; ?format=json)

All state derived from the config sits in one :class:`GatewayState`, replaced whole
on :meth:`Gateway.reload`; nothing is module-level. The views besides completions are
in endpoints.py; a completion request's path is pipeline.py; this class composes
them.
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
from kvroute.gateway import endpoints
from kvroute.gateway.access.limits import AdmissionGate
from kvroute.gateway.backends.backend import (
    AdapterFactory,
    Backend,
    HealthChecker,
    TransportFactory,
    adapter_factory,
    pooled_transport,
)
from kvroute.gateway.cacheview.router import CacheRouter
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.config.diff import config_changes, reload_refusal
from kvroute.gateway.config.gateway import GatewayConfig, ListenerConfig, load_config
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.middleware import (
    AdmissionMiddleware,
    AuthMiddleware,
    ErrorsMiddleware,
    ObserveMiddleware,
    RateLimitMiddleware,
)
from kvroute.gateway.ops.metrics import GatewayMetrics
from kvroute.gateway.pipeline import CompletionPipeline
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.gateway.proxy.forward import Proxy
from kvroute.gateway.proxy.prepare import CompletionPath
from kvroute.gateway.rollout.plan import RolloutStats
from kvroute.gateway.rollout.shadow import ShadowMirror
from kvroute.gateway.routing.classify import PrefixOracle
from kvroute.gateway.routing.policies.registry import CACHE_AWARE
from kvroute.gateway.state import GatewayState, build_state
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.gateway.traffic.status import TrafficMetrics
from kvroute.gateway.types import GatewayHandler, GatewayRequest, RequestContext
from kvroute.http.messages import Response, json_response
from kvroute.http.server import HttpServer, ServerLimits
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer

ACCESS_LOGGER = "kvroute.gateway.access"
_COMPLETION_PATHS = {p.value: p for p in CompletionPath}


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
        self.proxy = Proxy(self.metrics, rng=self.rng, clock=clock)
        self.health = HealthChecker(lambda: self._state.backends, lambda: self._state.config.health)
        self.handler: GatewayHandler = self._stack()
        self.server: HttpServer[RequestContext] | None = None
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
        # Traffic-shape settings apply at start, like capture's.
        self.traffic = TrafficShape(config.traffic, logging.getLogger("kvroute.gateway.traffic"))
        self.traffic_metrics = TrafficMetrics()
        self.rollout = RolloutStats()
        self.mirror = ShadowMirror(self.rollout, clock)
        self.completions = CompletionPipeline(
            self.proxy,
            self.mirror,
            self.traffic,
            self.capture,
            rng=self.rng,
            clock=clock,
            wall_clock=wall_clock,
            oracle=oracle,
        )

    @property
    def state(self) -> GatewayState:
        return self._state

    @property
    def cache_router(self) -> CacheRouter | None:
        """The cache views' router, once a route is cache_aware."""
        return self.completions.cache_router

    def _stack(self) -> GatewayHandler:
        app: GatewayHandler = self._endpoints
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
            loop = asyncio.get_running_loop()
            traffic, clock = self.traffic, self.clock

            def on_records(records: list[dict[str, Any]]) -> None:  # on capture's thread
                loop.call_soon_threadsafe(traffic.observe_records, records, clock())

            self.capture.on_records = on_records
        if _needs_cache_router(self._state.config):
            tokenizer = await asyncio.to_thread(self._load, self._state.config.tokenizer or None)
            self.completions.cache_router = CacheRouter(PromptTokens(tokenizer), self.logger)
        self.server = HttpServer(
            self.handler,
            _new_context,
            server_limits(listener),
            on_rejected=lambda status, kind: self.metrics.errors.inc((kind,)),
            logger=self.logger,
        )
        await self.server.start(host or listener.host, listener.port if port is None else port)
        self.health.start()
        return self.server.port

    async def stop(self, drain_timeout_s: float | None = None) -> int:
        """Graceful stop: refuse new work, keep answering probes for the drain grace and
        while streams in progress finish (up to the drain timeout), then close
        everything. Returns how many requests were cut."""
        cut = 0
        if self.server is not None:
            listener = self._state.config.listener
            cut = await self.server.shutdown(
                listener.drain_timeout_s if drain_timeout_s is None else drain_timeout_s,
                listener.drain_grace_s,
            )
        await self.health.stop()
        await self.mirror.aclose()
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
        if self.server is not None:  # the new config replaces the old whole: limits too
            self.server.limits = server_limits(config.listener)
        if self.cache_router is None and _needs_cache_router(config):
            # Rare (a reload adds the first cache_aware route): load here, blocking once.
            self.completions.cache_router = CacheRouter(
                PromptTokens(self._load(config.tokenizer or None)), self.logger
            )
        self._retired.extend(retired)
        self._close_idle_retired()
        self.metrics.reloads.inc(("ok",))

    def reload_from_file(self, who: str) -> None:
        """Re-read ``config_path`` (``who`` asked: "SIGHUP", "POST /admin/reload from
        ..."); on error, or a config that would open a closed gateway, keep the running
        config and raise. Logged either way, with who and what changed."""
        if self.config_path is None:
            raise InputError("this gateway was started without --config; nothing to reload")
        try:
            config = load_config(self.config_path)
            refusal = reload_refusal(self._state.config, config)
            if refusal is not None:
                raise InputError(refusal, path=str(self.config_path))
        except InputError as exc:
            self.metrics.reloads.inc(("error",))
            self.logger.error("reload failed (%s), the running config stays: %s", who, exc)
            raise
        changes = config_changes(self._state.config, config)
        self.reload(config)
        self.logger.info(
            "config reloaded (%s) from %s: %s",
            who,
            self.config_path,
            "; ".join(changes) or "nothing changed",
        )

    def _close_idle_retired(self) -> None:
        keep: list[Backend] = []
        for backend in self._retired:
            if backend.num_outstanding:
                keep.append(backend)
            else:
                asyncio.get_running_loop().create_task(backend.transport.aclose())
        self._retired = keep

    # -- endpoints ----------------------------------------------------------------------

    async def _endpoints(self, request: GatewayRequest) -> Response:
        path, method = request.path, request.method
        completion = _COMPLETION_PATHS.get(path)
        if completion is not None:
            endpoints.require_method(method, "POST")
            if self.server is not None and self.server.arrived_while_draining(request):
                raise _draining_error()  # new work; requests from before the drain finish
            return await self.completions(request, completion, self._state)
        if path == "/v1/models":
            endpoints.require_method(method, "GET")
            return endpoints.models(self._state, request)
        if path == "/":
            endpoints.require_method(method, "GET")
            return endpoints.index(self._state)
        if path == "/health":
            endpoints.require_method(method, "GET")
            return json_response(200, {"status": "ok"})
        if path == "/ready":
            endpoints.require_method(method, "GET")
            draining = self.server is not None and self.server.draining
            return endpoints.ready(self._state, self.clock(), draining)
        if path == "/metrics":
            endpoints.require_method(method, "GET")
            return endpoints.metrics(
                self.metrics,
                lambda: self._state.backends,
                self.gate,
                self.capture,
                self.rollout,
                self.traffic_metrics,
                self.traffic,
                self.clock,
            )
        if path.startswith("/admin/"):
            return endpoints.admin(
                request,
                lambda: self._state,
                lambda: self.reload_from_file(f"POST /admin/reload from {request.client}"),
                self.clock,
            )
        if path == "/kvroute/status":
            # Open like /metrics: shares and counts, no text.
            endpoints.require_method(method, "GET")
            return endpoints.traffic_status(
                self.traffic,
                self.clock(),
                request.query,
                [b.name for b in self._state.config.backends],
                tokenizes=self.cache_router is not None or self.capture is not None,
            )
        if path == "/kvroute/rollout":
            # Open like /metrics: counts and timings, no text.
            endpoints.require_method(method, "GET")
            return endpoints.rollout(self.rollout, self._state)
        raise GatewayError(
            f"no such endpoint: {method} {path}",
            status=404,
            error_type="invalid_request_error",
            kind="not_found",
            code="not_found",
        )


def server_limits(listener: ListenerConfig) -> ServerLimits:
    return ServerLimits(
        max_body_bytes=listener.max_body_bytes,
        keep_alive_s=listener.keep_alive_s,
        head_timeout_s=listener.head_timeout_s,
        body_timeout_s=listener.body_timeout_s,
        max_connections=listener.max_connections,
    )


def _new_context(request_id: str) -> RequestContext:
    return RequestContext()


def _draining_error() -> GatewayError:
    return GatewayError(
        "the gateway is shutting down; retry (another replica will answer)",
        status=503,
        error_type="server_error",
        kind="draining",
        code="draining",
        retry_after_s=1.0,
    )


def _needs_cache_router(config: GatewayConfig) -> bool:
    return any(r.policy == CACHE_AWARE for r in config.routes)
