"""From a classified request to an ordered list of backends. Pure apart from the
route's turn counter.

A request takes the first route whose ``match`` holds (model glob, workload class);
the route names a pool and a policy. The candidates are the pool's backends that
serve the (possibly aliased) model and are available now (health and breaker); the
policy orders them, most preferred first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.cacheview.view import NO_DISPLACEMENT, Displacement
from kvroute.gateway.config.gateway import ANY_POOL, RouteConfig
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.routing.policies.base import PickInput, Policy
from kvroute.gateway.routing.policies.registry import policy_registry
from kvroute.gateway.types import WorkloadClass


@dataclass(slots=True)
class Route:
    config: RouteConfig
    policy: Policy
    sequence: int = 0

    @staticmethod
    def build(config: RouteConfig) -> Route:
        return Route(config, policy_registry().get(config.policy)(config.policy_options))

    def next_sequence(self) -> int:
        """This request's turn number: 0, 1, 2, ..."""
        self.sequence += 1
        return self.sequence - 1


def select_route(routes: Sequence[Route], model: str, workload: WorkloadClass) -> Route:
    """The first route matching; 404 ``model_not_found`` when none does."""
    for route in routes:
        if route.config.matches(model, workload):
            return route
    raise GatewayError(
        f"no route for model '{model}' ({workload.value} request)",
        status=404,
        error_type="invalid_request_error",
        kind="no_route",
        code="model_not_found",
        param="model",
    )


def candidates(
    route: Route, backends: Sequence[Backend], model: str, now_s: float, pool: str | None = None
) -> list[Backend]:
    """The route's backends for ``model`` that are available now (in ``pool``, default
    the route's: a canary or shadow names another); 404 when none serves the model at
    all, 503 when those that do are all down."""
    pool = pool or route.config.pool
    serving = [b for b in backends if pool in (ANY_POOL, b.config.pool) and b.serves(model)]
    if not serving:
        raise GatewayError(
            f"no backend in pool '{pool}' serves model '{model}'",
            status=404,
            error_type="invalid_request_error",
            kind="no_route",
            code="model_not_found",
            param="model",
        )
    available = [b for b in serving if b.available(now_s)]
    if not available:
        raise GatewayError(
            f"no healthy backend in pool '{pool}' for model '{model}'",
            status=503,
            error_type="server_error",
            kind="no_backend",
            code="no_healthy_backend",
            retry_after_s=1.0,
        )
    return available


def order_backends(
    route: Route,
    available: Sequence[Backend],
    pick: PickInput,
    predicted_hits: Sequence[int] | None = None,
    displaced: Sequence[Displacement] | None = None,
) -> list[Backend]:
    """The policy's order; ``predicted_hits`` and ``displaced`` (per backend of
    ``available``) are the cache views' predictions when the route tokenized the prompt."""
    hits = predicted_hits or [0] * len(available)
    lost = displaced or [NO_DISPLACEMENT] * len(available)
    snapshots = [b.snapshot(h, d) for b, h, d in zip(available, hits, lost, strict=True)]
    order = route.policy.order(snapshots, pick)
    return [available[i] for i in order]
