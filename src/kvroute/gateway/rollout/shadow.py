"""Shadow mirroring, and the rollout record of every answer of a rollout route.

Once the client's answer is committed (the proxy returned it), a request the plan
mirrors is copied to the shadow pool by a background task: same path, same bytes
(``stream_options.include_usage`` included, so a streamed copy reports its usage),
plus ``x-kvroute-shadow: 1``. The copy's answer is read to the end (streams event by
event, for its time to first token) and thrown away; only its measurements are kept:
status, TTFT and end-to-end latency from when the copy was sent, prompt and cached
tokens as the shadow backend's engine adapter reads them (``usage``,
``prompt_tokens_details.cached_tokens``, llama.cpp's ``timings.cache_n``).

Nothing of it can reach the client: the task holds no reference to the client's
response, the client never waits for it, and every failure of the copy (refused,
reset, hung, timed out, cancelled at shutdown) ends in the record, never in an
exception. At most ``max_in_flight`` copies per route are outstanding; beyond, a copy
is dropped and counted. Copies do not touch breakers or retries: a broken candidate
pool shows up as its error rate, nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence

import orjson

from kvroute.errors import EngineError
from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.config.gateway import RouteConfig
from kvroute.gateway.config.rollout import ShadowConfig
from kvroute.gateway.outcome import Ending, Outcome
from kvroute.gateway.proxy.sse_relay import SseRelay
from kvroute.gateway.rollout.plan import RolloutPlan, RolloutStats, Sample, ShadowPair, Side
from kvroute.gateway.types import GatewayRequest
from kvroute.http.client import Exchange, FailureKind, UpstreamFailure, UpstreamRequest

SHADOW_HEADER = "x-kvroute-shadow"


class ShadowMirror:
    """Records the rollout routes' answers and sends their shadow copies."""

    def __init__(self, stats: RolloutStats, clock: Callable[[], float]) -> None:
        self.stats = stats
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: dict[str, int] = {}
        self._turn = itertools.count()
        self._closed = False

    def mirror(
        self,
        plan: RolloutPlan,
        route: RouteConfig,
        request: GatewayRequest,
        payload: bytes,
        backends: Sequence[Backend],
        model: str,
    ) -> ShadowPair | None:
        """The client's answer is committed: send its shadow copy if the plan says so.
        Returns the pair the copy's measurements go to, or None."""
        if not plan.shadow or route.shadow is None:
            return None
        return self._launch(route.name, route.shadow, request, payload, backends, model)

    def observe(self, outcome: Outcome) -> None:
        """A request of a rollout route is over: record it on the side it took (and as
        the primary half of its pair when it was mirrored). A request that got no
        answer (the client left first) is not recorded."""
        plan = outcome.plan.rollout
        if plan is None or outcome.ending is Ending.CANCELLED:
            return
        sample = Sample(
            outcome.pool,
            outcome.backend,
            outcome.status,
            outcome.error_kind,
            outcome.ttft_s,
            outcome.e2e_s,
            outcome.prompt_tokens,
            outcome.cached_tokens,
        )
        self.stats.served(plan, sample, plan.has_canary)
        if outcome.shadow is not None:
            self.stats.mirrored(outcome.shadow, Side.PRIMARY, sample)

    async def aclose(self) -> None:
        """Stop mirroring; cancel copies in flight (their connections are aborted)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one copy -----------------------------------------------------------------------

    def _launch(
        self,
        route: str,
        shadow: ShadowConfig,
        request: GatewayRequest,
        payload: bytes,
        backends: Sequence[Backend],
        model: str,
    ) -> ShadowPair | None:
        if self._closed:
            return None
        if self._in_flight.get(route, 0) >= shadow.max_in_flight:
            self.stats.dropped(route, shadow.pool, "dropped_busy")
            return None
        now = self.clock()
        available = [
            b
            for b in backends
            if b.config.pool == shadow.pool and b.serves(model) and b.available(now)
        ]
        if not available:
            self.stats.dropped(route, shadow.pool, "no_backend")
            return None
        # Least outstanding per unit of weight; ties take turns.
        turn = next(self._turn)
        backend = min(
            enumerate(available),
            key=lambda ib: (
                ib[1].num_outstanding / ib[1].config.weight,
                (ib[0] - turn) % len(available),
            ),
        )[1]
        pair = self.stats.new_pair(route, request.request_id)
        self._in_flight[route] = self._in_flight.get(route, 0) + 1
        self.stats.num_shadow_in_flight += 1
        copy = _copy_request(request, payload, backend)
        task = asyncio.get_running_loop().create_task(self._run(pair, backend, copy, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return pair

    async def _run(
        self, pair: ShadowPair, backend: Backend, copy: UpstreamRequest, request: GatewayRequest
    ) -> None:
        try:
            sample = await self._send(backend, copy, request.ctx.stream)
            self.stats.mirrored(pair, Side.SHADOW, sample)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must never reach the loop's handler as noise
            logging.getLogger("kvroute.gateway").exception("shadow copy failed")
        finally:
            self._in_flight[pair.route] -= 1
            self.stats.num_shadow_in_flight -= 1

    async def _send(self, backend: Backend, copy: UpstreamRequest, stream: bool) -> Sample:
        timeouts = backend.config.timeouts
        start = self.clock()
        deadline = start + timeouts.total_s
        first_deadline = min(deadline, start + timeouts.first_token_s)
        backend.num_outstanding += 1
        exchange: Exchange | None = None
        complete = False
        ttft_s: float | None = None
        error = ""
        event: object = None
        try:
            exchange = await backend.transport.send(
                copy,
                connect_timeout_s=timeouts.connect_s,
                head_timeout_s=max(0.001, first_deadline - self.clock()),
            )
            relay = SseRelay(strip_usage=False) if stream and exchange.status == 200 else None
            parts: list[bytes] = []
            while True:
                limit = first_deadline if relay is not None and ttft_s is None else deadline
                data = await exchange.read(max(0.001, limit - self.clock()))
                if data is None:
                    break
                if not data:
                    continue
                if relay is None:
                    parts.append(data)
                    continue
                if ttft_s is None:
                    ttft_s = self.clock() - start
                relay.feed(data)
            complete = True
            if relay is not None:
                event = relay.usage_event
            elif exchange.status == 200:
                with contextlib.suppress(orjson.JSONDecodeError):
                    event = orjson.loads(b"".join(parts))
        except UpstreamFailure as exc:
            kind = exc.kind
            if kind is FailureKind.TOTAL_TIMEOUT and stream and ttft_s is None:
                kind = FailureKind.FIRST_BYTE_TIMEOUT
            error = f"upstream_{kind.value}"
        finally:
            backend.num_outstanding -= 1
            if exchange is not None and not complete:
                exchange.abort()
        status = exchange.status if exchange is not None else 0
        prompt_tokens, cached_tokens = _usage(backend, event)
        e2e_s = self.clock() - start if complete else None
        return Sample(
            backend.config.pool,
            backend.name,
            status,
            error,
            ttft_s,
            e2e_s,
            prompt_tokens,
            cached_tokens,
        )


def _copy_request(request: GatewayRequest, payload: bytes, backend: Backend) -> UpstreamRequest:
    headers = [
        ("content-type", "application/json"),
        ("x-request-id", request.request_id),
        (SHADOW_HEADER, "1"),
    ]
    if request.ctx.stream:
        headers.append(("accept", "text/event-stream"))
    if backend.config.api_key:
        headers.append(("authorization", f"Bearer {backend.config.api_key}"))
    return UpstreamRequest("POST", request.path, tuple(headers), payload)


def _usage(backend: Backend, event: object) -> tuple[int | None, int | None]:
    if not isinstance(event, dict):
        return None, None
    usage = event.get("usage")
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    try:
        cache = backend.adapter.response_cache_usage(event)
    except EngineError:
        cache = None
    return (
        prompt if isinstance(prompt, int) else None,
        cache.cached_tokens if cache is not None else None,
    )
