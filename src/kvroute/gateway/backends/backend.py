"""Backends at run time: configuration, health, breaker, load, transport, and the
active health checker.

A :class:`Backend` outlives config reloads when its name, URL and engine stay the
same (its counters, breaker and open connections carry over); requests in flight
keep the :class:`Backend` they started with, so a reload never drops them.

Active health checks use each engine adapter's cheap probe (``/health``), never a
completion. Every ``interval_s`` every backend is probed; ``unhealthy_after``
failed probes in a row take it out of rotation, ``healthy_after`` good ones bring it
back. The same loop reads each engine's cache counters (``/metrics``) for the
gateway's own ``/metrics`` to re-export.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from kvroute.engines.base import CacheCounters, EngineAdapter, HealthState
from kvroute.engines.registry import make_adapter
from kvroute.errors import EngineError
from kvroute.gateway.backends.breaker import CircuitBreaker
from kvroute.gateway.cacheview.view import NO_DISPLACEMENT, BackendCacheView, Displacement
from kvroute.gateway.config.gateway import BackendConfig, BreakerConfig, HealthConfig
from kvroute.gateway.routing.policies.base import BackendSnapshot
from kvroute.http.client import PooledTransport, Transport

TransportFactory = Callable[[BackendConfig], Transport]
AdapterFactory = Callable[[BackendConfig], EngineAdapter]


def pooled_transport(config: BackendConfig) -> Transport:
    return PooledTransport(config.url)


def adapter_factory(client: httpx.AsyncClient) -> AdapterFactory:
    """Engine adapters (health, models, cache counters) sharing ``client``."""
    return lambda config: make_adapter(config.engine, config.url, client=client)


@dataclass(slots=True)
class Backend:
    config: BackendConfig
    transport: Transport
    adapter: EngineAdapter
    breaker: CircuitBreaker
    healthy: bool = True
    """Starts healthy: a gateway that starts with its engines must serve at once;
    a dead one is found by the first connect (breaker) or probe."""
    health_detail: str = "not probed yet"
    num_probe_failures: int = 0
    num_probe_successes: int = 0
    num_outstanding: int = 0
    cache_counters: CacheCounters | None = None
    discovered_models: tuple[str, ...] = ()
    cache_view: BackendCacheView | None = None
    """The gateway's model of its prefix cache; built on first use by a cache_aware route."""

    @property
    def name(self) -> str:
        return self.config.name

    def available(self, now_s: float) -> bool:
        return self.healthy and self.breaker.allows(now_s)

    def serves(self, model: str) -> bool:
        if self.config.models:
            return model in self.config.models
        return True

    @property
    def models(self) -> tuple[str, ...]:
        return self.config.models or self.discovered_models

    def snapshot(
        self, predicted_hit_tokens: int = 0, displaced: Displacement = NO_DISPLACEMENT
    ) -> BackendSnapshot:
        view = self.cache_view
        return BackendSnapshot(
            self.name,
            self.config.weight,
            self.num_outstanding,
            predicted_hit_tokens,
            displaced.num_tokens,
            displaced.idle_requests,
            view.num_slots if view is not None else None,
        )

    def view(self) -> BackendCacheView:
        """Its cache view, built on first use."""
        if self.cache_view is None:
            self.cache_view = BackendCacheView(self.config.engine, self.config.cache)
        return self.cache_view

    def on_probe(self, ok: bool, detail: str, health: HealthConfig) -> None:
        self.health_detail = detail
        if ok:
            self.num_probe_failures = 0
            self.num_probe_successes += 1
            if not self.healthy and self.num_probe_successes >= health.healthy_after:
                self.healthy = True
        else:
            self.num_probe_successes = 0
            self.num_probe_failures += 1
            if self.num_probe_failures >= health.unhealthy_after:
                self.healthy = False


def build_backends(
    configs: Sequence[BackendConfig],
    breaker: BreakerConfig,
    previous: Sequence[Backend],
    make_transport: TransportFactory,
    make_adapter: AdapterFactory,
) -> tuple[list[Backend], list[Backend]]:
    """Backends for ``configs``, reusing ``previous`` ones with the same name, URL and
    engine. Returns (current, retired): retired ones get no new requests; close their
    transports once their requests are done."""
    old = {b.name: b for b in previous}
    current: list[Backend] = []
    for config in configs:
        before = old.pop(config.name, None)
        if before is not None and (before.config.url, before.config.engine) == (
            config.url,
            config.engine,
        ):
            before.config = config
            before.breaker.failure_threshold = breaker.failure_threshold
            before.breaker.open_s = breaker.open_s
            current.append(before)
        else:
            if before is not None:
                old[config.name] = before
            current.append(
                Backend(
                    config=config,
                    transport=make_transport(config),
                    adapter=make_adapter(config),
                    breaker=CircuitBreaker(breaker.failure_threshold, breaker.open_s),
                )
            )
    return current, list(old.values())


class HealthChecker:
    """Probes every backend ``get_backends()`` returns, every ``interval_s``."""

    def __init__(
        self,
        get_backends: Callable[[], Sequence[Backend]],
        get_config: Callable[[], HealthConfig],
    ) -> None:
        self._get_backends = get_backends
        self._get_config = get_config
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def check_all(self) -> None:
        config = self._get_config()
        await asyncio.gather(*(self.check(b, config) for b in self._get_backends()))

    async def check(self, backend: Backend, config: HealthConfig) -> None:
        adapter = backend.adapter
        try:
            health = await asyncio.wait_for(adapter.health(), config.timeout_s)
            ok, detail = health.state is HealthState.READY, health.detail or health.state.value
        except TimeoutError:
            ok, detail = False, f"health probe timed out after {config.timeout_s} s"
        backend.on_probe(ok, detail, config)
        if not ok:
            return
        if not backend.config.models and not backend.discovered_models:
            with contextlib.suppress(EngineError, asyncio.TimeoutError):
                backend.discovered_models = tuple(
                    await asyncio.wait_for(adapter.models(), config.timeout_s)
                )
        if config.scrape_counters:
            with contextlib.suppress(EngineError, asyncio.TimeoutError):
                backend.cache_counters = await asyncio.wait_for(
                    adapter.cache_counters(), config.timeout_s
                )

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            with contextlib.suppress(Exception):  # a probe bug must not stop probing
                await self.check_all()
            interval = self._get_config().interval_s
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
