"""One completion request, top to bottom::

    parse -> classify -> plan -> forward -> finish(outcome)

- **parse**: the body, checked (a 400 names the field), and the key's model access;
- **classify**: the workload class (routing/classify.py);
- **plan**: route, session, rollout side, backends in the policy's order, the bytes
  to send, the cache view's pin on a cache_aware route (routing/plan.py);
- **forward**: to the first backend that answers, failing over (proxy/forward.py);
  once the answer is committed, its shadow copy (rollout/shadow.py);
- **finish**: when the request is over (its answer written or abandoned, or the
  gateway's own error sent), one :class:`~kvroute.gateway.outcome.Outcome` goes to
  each observer in turn: the chosen backend's cache view, the traffic window, capture,
  the rollout record.

The request's :class:`~kvroute.gateway.types.RequestContext` still collects what the
middlewares' access log and metrics read (route labels, backend, usage); the stages
hand each other typed values, and the observers get only the outcome.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from kvroute.gateway.access.auth import check_model
from kvroute.gateway.cacheview.router import CacheRouter
from kvroute.gateway.capture.records import CaptureEvent
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.outcome import Ending, Outcome
from kvroute.gateway.proxy.forward import Forward, Proxy
from kvroute.gateway.proxy.prepare import ClientBody, CompletionPath, parse_body
from kvroute.gateway.rollout.plan import ShadowPair
from kvroute.gateway.rollout.shadow import ShadowMirror
from kvroute.gateway.routing.classify import Classification, PrefixOracle, classify
from kvroute.gateway.routing.plan import RoutePlan, plan_route
from kvroute.gateway.state import GatewayState
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.gateway.traffic.status import observe_outcome
from kvroute.gateway.types import GatewayRequest
from kvroute.http.messages import Response


class CompletionPipeline:
    """Answers ``POST /v1/chat/completions`` and ``/v1/completions``.

    Each request is answered with the :class:`GatewayState` it arrived under (a reload
    swaps the gateway's; a request keeps the one it started with). ``cache_router`` is
    set by the gateway once a route is cache_aware.
    """

    def __init__(
        self,
        proxy: Proxy,
        mirror: ShadowMirror,
        traffic: TrafficShape,
        capture: TraceCapture | None,
        *,
        rng: random.Random,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        oracle: PrefixOracle | None = None,
    ) -> None:
        self.proxy, self.mirror = proxy, mirror
        self.traffic, self.capture = traffic, capture
        self.rng, self.clock, self.wall_clock, self.oracle = rng, clock, wall_clock, oracle
        self.cache_router: CacheRouter | None = None

    async def __call__(
        self, request: GatewayRequest, path: CompletionPath, state: GatewayState
    ) -> Response:
        ctx = request.ctx
        # parse
        body = parse_body(request.body, path)
        ctx.model, ctx.stream = body.model, body.stream
        check_model(state.keys_by_name.get(ctx.key_name), body.model)
        # classify
        label = classify(
            body.data,
            is_chat=path is CompletionPath.CHAT,
            options=state.config.classify,
            oracle=self.oracle,
        )
        ctx.workload, ctx.workload_reason = label.workload, label.reason
        # plan
        plan = plan_route(
            state,
            request,
            body,
            label.workload,
            cache_router=self.cache_router,
            rng=self.rng,
            now_s=self.clock(),
        )
        # forward
        try:
            response = await self.proxy.forward(
                Forward(
                    request=request,
                    body=body,
                    payload=plan.payload,
                    backends=plan.backends,
                    strip_usage=plan.strip_usage,
                    route_headers=state.config.listener.route_headers,
                    route_detail=plan.detail,
                    retry=state.config.retry,
                )
            )
        except GatewayError as exc:
            refused = Ending.REFUSED
            self.finish(self._outcome(request, body, label, plan, refused, exc.status, exc.kind))
            raise
        except BaseException:  # the client left, or a bug: nothing was sent
            cancelled = Ending.CANCELLED
            self.finish(self._outcome(request, body, label, plan, cancelled, 0, ctx.error_kind))
            raise
        shadow = None
        if plan.rollout is not None:
            shadow = self.mirror.mirror(
                plan.rollout, plan.route.config, request, plan.payload, state.backends, plan.model
            )
        # finish, once the answer is written (or abandoned)
        response.closers.append(
            lambda: self.finish(
                self._outcome(
                    request,
                    body,
                    label,
                    plan,
                    Ending.ANSWERED,
                    response.status,
                    ctx.error_kind,  # as the forward left it (a stream cut, a client gone)
                    shadow,
                )
            )
        )
        return response

    def finish(self, outcome: Outcome) -> None:
        """Hand ``outcome`` to each observer, in order: the cache view of the backend
        the policy chose, the traffic window, capture, the rollout record."""
        answered = outcome.ending is Ending.ANSWERED
        lease = outcome.plan.lease
        if lease is not None:
            lease.release((outcome.completion_tokens or 0) if answered else 0)
        capture = self.capture
        if answered:
            # Without a cache_aware route the window gets the prompt's blocks from
            # capture (tokenized on its worker) when capture hashes at its block size.
            via_capture = (
                lease is None
                and capture is not None
                and capture.on_records is not None
                and capture.config.block_size_tokens == self.traffic.config.block_size_tokens
            )
            if not via_capture:
                observe_outcome(self.traffic, outcome, self.clock())
            if capture is not None:
                capture.submit(_capture_event(outcome, observe=via_capture))
        self.mirror.observe(outcome)

    def _outcome(
        self,
        request: GatewayRequest,
        body: ClientBody,
        label: Classification,
        plan: RoutePlan,
        ending: Ending,
        status: int,
        error_kind: str,
        shadow: ShadowPair | None = None,
    ) -> Outcome:
        ctx = request.ctx
        return Outcome(
            ending=ending,
            status=status,
            error_kind=error_kind,
            request_id=request.request_id,
            received_s=request.received_s,
            ended_s=self.clock(),
            ended_unix_s=self.wall_clock(),
            body=body.data,
            model=body.model,
            workload=label.workload,
            plan=plan,
            shadow=shadow,
            pool=ctx.pool,
            backend=ctx.backend,
            ttft_s=ctx.ttft_s,
            e2e_s=ctx.e2e_s,
            prompt_tokens=ctx.prompt_tokens,
            completion_tokens=ctx.completion_tokens,
            cached_tokens=ctx.cached_tokens,
        )


def _capture_event(outcome: Outcome, *, observe: bool) -> CaptureEvent:
    lease = outcome.plan.lease
    token_ids = None
    if lease is not None:
        token_ids = (lease.router.prompts.tokenizer.name, lease.prediction.token_ids)
    return CaptureEvent(
        body=outcome.body,
        arrival_unix_s=outcome.ended_unix_s - (outcome.ended_s - outcome.received_s),
        end_unix_s=outcome.ended_unix_s,
        session_id=outcome.plan.session_key,
        model=outcome.model,
        workload=outcome.workload.value,
        backend=outcome.backend,
        status=outcome.status,
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        cached_tokens=outcome.cached_tokens,
        token_ids=token_ids,
        observe=observe,
    )
