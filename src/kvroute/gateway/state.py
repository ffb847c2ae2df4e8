"""What a config becomes at run time, swapped whole on reload.

A :class:`GatewayState` is built from a :class:`GatewayConfig` and the previous state:
backends, rate-limit buckets (per key name, kept when the key's limits stay the same)
and routes carry over where they can, so a reload loses no counters and drops no
request. Requests in flight hold the objects they started with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvroute.gateway.access.auth import KeyStore
from kvroute.gateway.access.limits import KeyLimiter, TokenBucket
from kvroute.gateway.backends.backend import (
    AdapterFactory,
    Backend,
    TransportFactory,
    build_backends,
)
from kvroute.gateway.config.gateway import GatewayConfig, KeyConfig
from kvroute.gateway.routing.routes import Route


@dataclass(frozen=True, slots=True)
class GatewayState:
    config: GatewayConfig
    backends: tuple[Backend, ...]
    routes: tuple[Route, ...]
    keys: KeyStore
    keys_by_name: Mapping[str, KeyConfig]
    limiters: Mapping[str, KeyLimiter]


def build_state(
    config: GatewayConfig,
    previous: GatewayState | None,
    *,
    make_transport: TransportFactory,
    make_adapter: AdapterFactory,
    now_s: float,
) -> tuple[GatewayState, list[Backend]]:
    """The state for ``config``, and the backends the previous state had that this one
    retires (close their transports when their requests are done)."""
    backends, retired = build_backends(
        config.backends,
        config.breaker,
        previous.backends if previous else (),
        make_transport,
        make_adapter,
    )
    old_keys = previous.keys_by_name if previous else {}
    old_limiters = previous.limiters if previous else {}
    limiters: dict[str, KeyLimiter] = {}
    for key in config.keys:
        before = old_keys.get(key.name)
        same = before is not None and (
            (before.requests_per_minute, before.tokens_per_minute)
            == (key.requests_per_minute, key.tokens_per_minute)
        )
        if same and key.name in old_limiters:
            limiters[key.name] = old_limiters[key.name]
        else:
            limiters[key.name] = KeyLimiter(
                requests=TokenBucket.per_minute(key.requests_per_minute, now_s)
                if key.requests_per_minute
                else None,
                tokens=TokenBucket.per_minute(key.tokens_per_minute, now_s)
                if key.tokens_per_minute
                else None,
            )
    state = GatewayState(
        config=config,
        backends=tuple(backends),
        routes=tuple(Route.build(r) for r in config.routes),
        keys=KeyStore(config.keys),
        keys_by_name={k.name: k for k in config.keys},
        limiters=limiters,
    )
    return state, retired
