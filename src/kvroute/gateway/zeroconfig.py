"""Zero-config mode: a gateway over the engines ``kvroute engines up`` started.

Every recorded engine becomes a backend (named like its record, serving its model)
in pool ``default``; one route sends every request there by least outstanding
requests. Pure: takes the records.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvroute.engines.state import EngineRecord
from kvroute.errors import UsageError
from kvroute.gateway.config import BackendConfig, GatewayConfig, ListenerConfig, RouteConfig


def config_from_records(
    records: Sequence[EngineRecord], listener: ListenerConfig, source: str
) -> GatewayConfig:
    if not records:
        raise UsageError(
            f"no engines recorded in {source} and no --config given",
            hint="start some with `kvroute engines up --engine llamacpp`, or pass --config",
        )
    backends = tuple(
        BackendConfig(name=r.name, url=r.base_url, engine=r.engine, models=(r.model_name,))
        for r in records
    )
    return GatewayConfig(
        backends=backends,
        routes=(RouteConfig(name="default", pool="default"),),
        listener=listener,
        source=source,
    )
