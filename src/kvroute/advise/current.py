"""What runs today (``--current gateway.yaml``): the engine each class reaches, and the diff. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kvroute.advise.result import Change, ClassDecision
from kvroute.gateway.config.gateway import ANY_POOL, GatewayConfig
from kvroute.gateway.types import WorkloadClass


def engine_by_class(config: GatewayConfig) -> dict[str, str]:
    """Per workload class, the engine its first matching route's pool runs (the most
    common one when the pool mixes engines). Routes are matched on class only: a model
    glob narrows traffic, it does not change which engine a class reaches."""
    out: dict[str, str] = {}
    for workload in WorkloadClass:
        route = next((r for r in config.routes if not r.classes or workload in r.classes), None)
        if route is None:
            continue
        engines = Counter(b.engine for b in config.backends if route.pool in (ANY_POOL, b.pool))
        if engines:
            out[workload.value] = engines.most_common(1)[0][0]
    return out


def single_engine(current: dict[str, str]) -> str | None:
    """The engine most classes run on today (what ``all`` compares with)."""
    if not current:
        return None
    return Counter(current.values()).most_common(1)[0][0]


def changes(decisions: Sequence[ClassDecision], current: dict[str, str]) -> list[Change]:
    return [Change(d.workload, current.get(d.workload), d.engine, d.move.value) for d in decisions]
