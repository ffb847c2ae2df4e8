"""Zero-config mode: a gateway over the engines ``kvroute engines up`` started.

Every recorded engine becomes a backend (named like its record, serving its model),
with the cache settings it was started with read back from its command line
(:func:`~kvroute.engines.snippet.cache_settings`: vLLM's ``--block-size``, llama.cpp's
``--parallel``, ``--ctx-size`` and ``--cache-ram``), so the gateway's cache view models
the engine that runs.

Pools hold one engine kind each (``llamacpp``, ``vllm``, ...): engines that cache
differently are not interchangeable replicas, and a session moved between them pays its
whole prompt again. Routes are ``cache_aware``: a session's next turn goes where its
prefix is cached. When several kinds serve one model, the plain model name goes to the
kind with the most replicas (ties: SGLang, then vLLM, then llama.cpp: the larger cache
first) and ``MODEL@KIND`` picks a kind; ``mixed=True`` puts every engine in one pool
instead (``kvroute serve --mix-engines``). Pure: takes the records.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvroute.engines.snippet import cache_settings
from kvroute.engines.state import EngineRecord
from kvroute.errors import UsageError
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.gateway.config.gateway import BackendConfig, GatewayConfig, ListenerConfig, RouteConfig
from kvroute.gateway.routing.policies.registry import CACHE_AWARE

MIXED_POOL = "default"
_PREFERENCE = ("sglang", "vllm", "llamacpp")
"""Tie-break between kinds serving one model: the larger, finer-grained cache first."""


def config_from_records(
    records: Sequence[EngineRecord], listener: ListenerConfig, source: str, *, mixed: bool = False
) -> GatewayConfig:
    if not records:
        raise UsageError(
            f"no engines recorded in {source} and no --config given",
            hint="start some with `kvroute engines up --engine llamacpp`, or pass --config",
        )
    backends = tuple(
        BackendConfig(
            name=r.name,
            url=r.base_url,
            engine=r.engine,
            models=(r.model_name,),
            pool=MIXED_POOL if mixed else r.engine,
            cache=_cache_view(r),
        )
        for r in records
    )
    return GatewayConfig(
        backends=backends,
        routes=(RouteConfig(name="default", pool=MIXED_POOL, policy=CACHE_AWARE),)
        if mixed
        else _routes(records),
        listener=listener,
        source=source,
    )


def _routes(records: Sequence[EngineRecord]) -> tuple[RouteConfig, ...]:
    """Per model: ``MODEL@KIND`` for each kind serving it, then the plain name to the
    preferred kind (routes match in order)."""
    kinds_by_model: dict[str, dict[str, int]] = {}
    for r in records:
        kinds = kinds_by_model.setdefault(r.model_name, {})
        kinds[r.engine] = kinds.get(r.engine, 0) + 1
    routes: list[RouteConfig] = []
    plain: list[RouteConfig] = []
    for model, kinds in kinds_by_model.items():
        if len(kinds) > 1:
            routes.extend(
                RouteConfig(
                    name=f"{model}@{kind}",
                    pool=kind,
                    policy=CACHE_AWARE,
                    models=(f"{model}@{kind}",),
                    upstream_model=model,
                )
                for kind in kinds
            )
        preferred = max(kinds, key=lambda k: (kinds[k], -_rank(k)))
        plain.append(RouteConfig(name=model, pool=preferred, policy=CACHE_AWARE, models=(model,)))
    if len(plain) == 1:
        # One model: whatever name a client asks for goes to it, as before.
        plain = [RouteConfig(name="default", pool=plain[0].pool, policy=CACHE_AWARE)]
    return (*routes, *plain)


def _cache_view(record: EngineRecord) -> CacheViewConfig:
    flags = cache_settings(record)
    return CacheViewConfig(
        capacity_tokens=flags.get("capacity_tokens"),
        slots=flags.get("slots"),
        cache_ram_mib=flags.get("cache_ram_mib", CacheViewConfig().cache_ram_mib),
        block_size_tokens=flags.get("block_size_tokens"),
    )


def _rank(kind: str) -> int:
    return _PREFERENCE.index(kind) if kind in _PREFERENCE else len(_PREFERENCE)
