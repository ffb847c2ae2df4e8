"""Per-request route planning, between the route and the forward: the session key,
the backends' order (with cache_aware's predicted hits), and what runs once the answer
is complete (the cache view, the traffic window, capture).

Plain functions over what :class:`~kvroute.gateway.app.Gateway` owns; the gateway
passes its parts in (router, rng, traffic window, capture, clocks).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.cacheview.router import CacheRouter
from kvroute.gateway.capture.records import capture_event
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.config.gateway import SessionConfig
from kvroute.gateway.routing.policies.base import PickInput
from kvroute.gateway.routing.policies.registry import CACHE_AWARE
from kvroute.gateway.routing.routes import Route, order_backends
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.gateway.traffic.status import observe_request, observing_finish
from kvroute.gateway.types import Request, Response


def session_key(session: SessionConfig, request: Request, data: dict[str, object]) -> str | None:
    value = request.headers.get(session.header)
    if value:
        return value
    user = data.get("user") if session.use_user_field else None
    return user if isinstance(user, str) and user else None


def order(
    request: Request,
    route: Route,
    available: list[Backend],
    data: dict[str, Any],
    session_key: str | None,
    *,
    cache_router: CacheRouter | None,
    rng: random.Random,
    traffic: TrafficShape,
    clock: Callable[[], float],
) -> tuple[list[Backend], Callable[[int], None] | None]:
    """The policy's order of ``available``; on a cache_aware route also the
    function that records the request's end in the chosen backend's cache view."""
    router = cache_router if route.config.policy == CACHE_AWARE else None
    prediction = router.predict(data, available, session_key) if router is not None else None
    pick = PickInput(
        rng=rng,
        sequence=route.next_sequence(),
        session_key=session_key,
        workload=request.ctx.workload,
        prompt_tokens=prediction.num_tokens if prediction is not None else 0,
    )
    hits = prediction.hits if prediction is not None else None
    displaced = prediction.displaced if prediction is not None else None
    ordered = order_backends(route, available, pick, hits, displaced)
    if router is None or prediction is None:
        return ordered, None
    explained = prediction.explain(available, ordered[0])
    request.ctx.prompt_token_ids = (router.prompts.tokenizer.name, prediction.token_ids)
    detail = request.ctx.route_detail  # a rollout's decision comes first
    request.ctx.route_detail = f"{detail} {explained}" if detail else explained
    finish = router.start(prediction, available, ordered[0], data)
    return ordered, observing_finish(
        traffic,
        request.ctx,
        prediction,
        available.index(ordered[0]),
        ordered[0].name,
        finish,
        clock,
    )


def when_done(
    request: Request,
    response: Response,
    data: dict[str, Any],
    session_key: str | None,
    finish: Callable[[int], None] | None,
    *,
    traffic: TrafficShape,
    capture: TraceCapture | None,
    clock: Callable[[], float],
    wall_clock: Callable[[], float],
) -> None:
    """What runs once the answer is complete: the cache view and the traffic window,
    then capture."""
    ctx = request.ctx
    # Without a cache_aware route the window gets the prompt's blocks from capture
    # (tokenized on its worker) when capture hashes at the window's block size.
    via_capture = (
        finish is None
        and capture is not None
        and capture.on_records is not None
        and capture.config.block_size_tokens == traffic.config.block_size_tokens
    )
    if finish is not None:
        done = finish
        response.closers.append(lambda: done(ctx.completion_tokens or 0))
    elif not via_capture:
        response.closers.append(lambda: observe_request(traffic, ctx, clock()))
    if capture is not None:
        response.closers.append(
            lambda: capture.submit(
                capture_event(
                    request,
                    data,
                    session_key,
                    response.status,
                    clock,
                    wall_clock,
                    observe=via_capture,
                )
            )
        )
