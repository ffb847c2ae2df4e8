"""The plan stage of a completion request: its route, session key, rollout side, the
backends to try in the policy's order, the bytes to send them, and on a cache_aware
route the request pinned in the chosen backend's cache view.

Plain functions over what the pipeline passes in (state, router, rng, clock).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.cacheview.router import CacheLease, CacheRouter
from kvroute.gateway.config.gateway import SessionConfig
from kvroute.gateway.proxy.prepare import ClientBody, upstream_body
from kvroute.gateway.rollout.plan import RolloutPlan, plan_rollout, rollout_candidates
from kvroute.gateway.routing.policies.base import PickInput
from kvroute.gateway.routing.policies.registry import CACHE_AWARE
from kvroute.gateway.routing.routes import Route, order_backends, select_route
from kvroute.gateway.state import GatewayState
from kvroute.gateway.types import GatewayRequest, WorkloadClass


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Where one request goes, decided before it is forwarded."""

    route: Route
    model: str
    """The model the backends serve it under (the route's ``upstream_model`` or the
    client's)."""
    session_key: str | None
    rollout: RolloutPlan | None
    backends: list[Backend]
    """The backends to try, in the policy's order (the first is the policy's choice)."""
    payload: bytes
    """The body sent upstream (see :func:`~kvroute.gateway.proxy.prepare.upstream_body`)."""
    strip_usage: bool
    """The gateway asked for the stream's usage: the relay removes it again."""
    lease: CacheLease | None
    """cache_aware only: the request pinned in the first backend's cache view."""
    detail: str
    """Why, as ``x-kvroute-route`` says it (the rollout side, cache_aware's hits)."""


def session_key(
    session: SessionConfig, headers: Mapping[str, str], data: Mapping[str, Any]
) -> str | None:
    value = headers.get(session.header)
    if value:
        return value
    user = data.get("user") if session.use_user_field else None
    return user if isinstance(user, str) and user else None


def plan_route(
    state: GatewayState,
    request: GatewayRequest,
    body: ClientBody,
    workload: WorkloadClass,
    *,
    cache_router: CacheRouter | None,
    rng: random.Random,
    now_s: float,
) -> RoutePlan:
    """The plan for ``request`` (its parsed ``body``). Raises the
    :class:`~kvroute.gateway.errors.GatewayError` of a model no route or backend
    serves (404) or whose backends are all down (503). Writes the route's name, pool
    and policy into the request's context as soon as they are known (the access
    log's and metrics' labels, also when a later step refuses the request)."""
    ctx, data = request.ctx, body.data
    route = select_route(state.routes, body.model, workload)
    ctx.route, ctx.pool, ctx.policy = route.config.name, route.config.pool, route.config.policy
    upstream_model = route.config.upstream_model or body.model
    key = session_key(state.config.session, request.headers, data)
    rollout = plan_rollout(route.config, key, ctx.key_name, request.request_id)
    rollout, available = rollout_candidates(route, rollout, state.backends, upstream_model, now_s)
    router = cache_router if route.config.policy == CACHE_AWARE else None
    prediction = router.predict(data, available, key) if router is not None else None
    pick = PickInput(
        rng=rng,
        sequence=route.next_sequence(),
        session_key=key,
        workload=workload,
        prompt_tokens=prediction.num_tokens if prediction is not None else 0,
    )
    hits = prediction.hits if prediction is not None else None
    displaced = prediction.displaced if prediction is not None else None
    ordered = order_backends(route, available, pick, hits, displaced)
    detail = rollout.detail if rollout is not None else ""
    lease = None
    if router is not None and prediction is not None:
        explained = prediction.explain(available, ordered[0])
        detail = f"{detail} {explained}" if detail else explained  # the rollout's first
        lease = router.start(prediction, available, ordered[0], data)
    inject = body.stream and not body.wants_usage
    payload = upstream_body(body, inject_usage=inject, model=route.config.upstream_model)
    return RoutePlan(route, upstream_model, key, rollout, ordered, payload, inject, lease, detail)
