"""A route's gray-rollout settings: a weighted ``canary`` pool and a ``shadow`` pool.

Parsed from the route's ``canary:`` and ``shadow:`` mappings (see docs/gateway.md,
"Gray rollout"); every error names the file, line and field like the rest of the
config. No imports from config.py, which imports this.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kvroute.gateway.config.reader import ConfigNode

DEFAULT_SHADOW_MAX_IN_FLIGHT = 8


class StickyBy(enum.Enum):
    """What a sampling decision hashes, so equal keys always land on the same side."""

    SESSION = "session"
    """The session key (``session.header``, else the body's ``user``), else the API
    key's name, else the request id."""
    REQUEST = "request"
    """The request id: every request decides afresh."""


@dataclass(frozen=True, slots=True)
class CanaryConfig:
    pool: str
    weight: float
    """Share of the route's traffic (of its sticky keys) sent to ``pool``, in (0, 1]."""
    sticky: StickyBy = StickyBy.SESSION
    keys: tuple[str, ...] = ()
    """API key names whose requests may go to the canary; empty: any."""


@dataclass(frozen=True, slots=True)
class ShadowConfig:
    pool: str
    share: float
    """Share of the route's requests mirrored to ``pool``, in (0, 1]."""
    sample: StickyBy = StickyBy.REQUEST
    max_in_flight: int = DEFAULT_SHADOW_MAX_IN_FLIGHT
    """Mirrored requests in flight at most (per route); beyond, copies are dropped."""
    keys: tuple[str, ...] = ()


def parse_canary(node: ConfigNode, route_pool: str, pools: set[str]) -> CanaryConfig:
    node.check_keys("pool", "weight", "sticky", "keys")
    pool = _pool(node, route_pool, pools)
    if "weight" not in node.data:
        raise node.error("'weight' is required (a share in (0, 1], e.g. 0.1)")
    weight = node.number("weight", 0.0)
    if not 0.0 < weight <= 1.0:
        raise node.error(f"must be a share in (0, 1], got {weight:g}", "weight")
    return CanaryConfig(
        pool=pool,
        weight=weight,
        sticky=_sticky(node, "sticky", StickyBy.SESSION),
        keys=node.strings("keys"),
    )


def parse_shadow(node: ConfigNode, route_pool: str, pools: set[str]) -> ShadowConfig:
    node.check_keys("pool", "share", "sample", "max_in_flight", "keys")
    pool = _pool(node, route_pool, pools)
    if "share" not in node.data:
        raise node.error("'share' is required (a share in (0, 1], e.g. 0.2)")
    share = node.number("share", 0.0)
    if not 0.0 < share <= 1.0:
        raise node.error(f"must be a share in (0, 1], got {share:g}", "share")
    max_in_flight = DEFAULT_SHADOW_MAX_IN_FLIGHT
    if "max_in_flight" in node.data:
        max_in_flight = node.integer("max_in_flight")
        if max_in_flight < 1:
            raise node.error("must be ≥ 1", "max_in_flight")
    return ShadowConfig(
        pool=pool,
        share=share,
        sample=_sticky(node, "sample", StickyBy.REQUEST),
        max_in_flight=max_in_flight,
        keys=node.strings("keys"),
    )


def _pool(node: ConfigNode, route_pool: str, pools: set[str]) -> str:
    pool = node.string("pool")
    if pool not in pools:
        valid = ", ".join(sorted(pools))
        raise node.error(f"no backend is in pool '{pool}' (pools: {valid})", "pool")
    if pool == route_pool:
        raise node.error(f"is the route's own pool '{pool}'; name another pool", "pool")
    return pool


def _sticky(node: ConfigNode, key: str, default: StickyBy) -> StickyBy:
    if key not in node.data:
        return default
    value = node.string(key)
    valid = [s.value for s in StickyBy]
    if value not in valid:
        raise node.error(f"unknown value '{value}' (valid: {', '.join(valid)})", key)
    return StickyBy(value)
