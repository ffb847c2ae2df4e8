"""The gateway's views besides completions: models, readiness, metrics, the traffic
status page, the rollout comparison, and the admin endpoints.

Each takes the parts of the gateway it reads (the state, counters, a clock) and
returns a :class:`Response`; :meth:`Gateway._endpoints` decides which one a path gets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvroute.errors import InputError
from kvroute.gateway.access.auth import check_admin
from kvroute.gateway.access.limits import AdmissionGate
from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.ops.metrics import GatewayMetrics
from kvroute.gateway.rollout.plan import RolloutStats
from kvroute.gateway.state import GatewayState
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.gateway.traffic.status import TrafficMetrics, status, status_html
from kvroute.gateway.types import GatewayRequest
from kvroute.http.messages import Response, json_response

INDEX = (
    ("POST /v1/chat/completions, /v1/completions", "OpenAI-compatible completions, routed"),
    ("GET /v1/models", "the models the backends serve"),
    ("GET /kvroute/status", "live traffic shape: prefix overlap, band, per-backend hits"),
    ("GET /kvroute/rollout", "canary and shadow comparison (JSON)"),
    ("GET /metrics", "Prometheus metrics"),
    ("GET /health, /ready", "liveness, readiness"),
)


def index(state: GatewayState) -> Response:
    """``GET /``: what this is and where to go (a browser pointed at the gateway's root
    would otherwise get a 404 JSON error). No keys or backend URLs: it is open."""
    rows = "".join(f"<tr><td><code>{p}</code></td><td>{w}</td></tr>" for p, w in INDEX)
    num = len(state.backends)
    page = (
        "<!doctype html><html><head><meta charset=utf-8><title>kvroute gateway</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
        "td{padding:.2em .8em;border-bottom:1px solid #ddd}</style></head><body>"
        f"<h1>kvroute gateway</h1><p>{num} backend{'' if num == 1 else 's'}. Point an OpenAI "
        "client at <code>/v1</code>.</p>"
        f"<table>{rows}</table></body></html>"
    )
    return Response(200, [("content-type", "text/html; charset=utf-8")], page.encode())


def models(state: GatewayState, request: GatewayRequest) -> Response:
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


def ready(state: GatewayState, now_s: float, draining: bool) -> Response:
    up = [b.name for b in state.backends if b.available(now_s)]
    ready = bool(up) and not draining
    return json_response(
        200 if ready else 503,
        {
            "status": "ready" if ready else "not ready",
            "backends_available": up,
            "draining": draining,
        },
    )


def metrics(
    gateway_metrics: GatewayMetrics,
    backends: Callable[[], Sequence[Backend]],
    gate: AdmissionGate,
    capture: TraceCapture | None,
    rollout_stats: RolloutStats,
    traffic_metrics: TrafficMetrics,
    traffic: TrafficShape,
    clock: Callable[[], float],
) -> Response:
    body = gateway_metrics.exposition(backends, gate, capture)
    body += rollout_stats.exposition()
    body += traffic_metrics.exposition(traffic, clock())
    return Response(200, [("content-type", "text/plain; version=0.0.4")], body)


def traffic_status(
    traffic: TrafficShape,
    now_s: float,
    query: str,
    backend_names: Sequence[str] = (),
    *,
    tokenizes: bool = False,
) -> Response:
    data = status(traffic, now_s, backend_names, tokenizes=tokenizes)
    if "format=json" in query.split("&"):
        return json_response(200, data)
    return Response(200, [("content-type", "text/html; charset=utf-8")], status_html(data))


def rollout(rollout_stats: RolloutStats, state: GatewayState) -> Response:
    return json_response(200, rollout_stats.view(r.config for r in state.routes))


def admin(
    request: GatewayRequest,
    state: Callable[[], GatewayState],
    reload_from_file: Callable[[], None],
    clock: Callable[[], float],
) -> Response:
    check_admin(request.headers, state().config.admin_key_sha256)
    if request.path == "/admin/reload":
        require_method(request.method, "POST")
        try:
            reload_from_file()
        except InputError as exc:
            raise GatewayError(
                f"reload failed, the running config stays: {exc}",
                status=400,
                error_type="invalid_request_error",
                kind="bad_config",
                code="invalid_config",
            ) from None
        return json_response(200, {"status": "reloaded", "backends": len(state().backends)})
    if request.path == "/admin/backends":
        require_method(request.method, "GET")
        now = clock()
        return json_response(200, {"backends": [_describe(b, now) for b in state().backends]})
    raise GatewayError(
        f"no such admin endpoint: {request.path}",
        status=404,
        error_type="invalid_request_error",
        kind="not_found",
        code="not_found",
    )


def require_method(method: str, wanted: str) -> None:
    """A 405 with ``Allow`` unless ``method`` is ``wanted`` (a GET resource takes HEAD
    too: the server sends the head only)."""
    allowed = ("GET", "HEAD") if wanted == "GET" else (wanted,)
    if method not in allowed:
        raise GatewayError(
            f"method {method} not allowed here (use {wanted})",
            status=405,
            error_type="invalid_request_error",
            kind="bad_request",
            code="method_not_allowed",
            allow=", ".join(allowed),
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
