"""The ``gateway.yaml`` that ``kvroute serve`` runs unchanged: pools per engine, routes per class. Pure.

- one backend per replica of each engine the advice uses (and per incumbent a proposed
  move leaves in place), in a pool named after the engine, its ``cache:`` sized as the
  flags start it; replica ``i`` of an engine listens :data:`REPLICA_PORT_STEP` x ``i``
  ports above the first (:func:`replica_urls`), as its launch script starts it;
- one route per class, ``cache_aware`` where routing by session beat round robin in the
  replica replay, else ``least_outstanding``;
- a proposed move (switch or add) keeps the class on its incumbent's pool with a
  ``canary:`` of :data:`CANARY_WEIGHT` to the advised engine: the alert rules say when
  to raise it;
- capture on, so the next ``kvroute advise`` runs on live traffic;
- API keys as a placeholder that matches no key when the deployment is exposed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from kvroute.advise.result import Advice, ClassDecision, EngineFlags, Move
from kvroute.advise.run import ALL

DEFAULT_PORTS = {"llamacpp": 8081, "vllm": 8082, "sglang": 8083}
REPLICA_PORT_STEP = 10
"""Replica ``i`` (from 0) of an engine listens at the first replica's port + 10 x ``i``:
the engines' default ports (8081-8083) never collide for up to 8 replicas each."""
CANARY_WEIGHT = 0.1
CACHE_AWARE_MIN_GAIN = 0.01
NO_KEY_SHA256 = "0" * 64
"""A well-formed SHA-256 no key hashes to: the gateway stays closed until it is replaced."""


def default_url(engine: str) -> str:
    return f"http://127.0.0.1:{DEFAULT_PORTS[engine]}"


def replica_urls(engine: str, num_replicas: int, given: Sequence[str]) -> list[str]:
    """The URL of each replica: those ``given`` (``--url``, in order), then ports
    :data:`REPLICA_PORT_STEP` apart above the first one's (or the default's)."""
    urls = list(given[:num_replicas])
    first = urlsplit(given[0] if given else default_url(engine))
    port = first.port or (443 if first.scheme == "https" else 80)
    host = first.hostname or "127.0.0.1"
    for i in range(len(urls), num_replicas):
        netloc = f"{host}:{port + REPLICA_PORT_STEP * i}"
        urls.append(urlunsplit((first.scheme, netloc, first.path, "", "")))
    return urls


def engine_replicas(advice: Advice) -> dict[str, int]:
    """Engine -> instances (flags.py): 1 for an engine with no flags entry."""
    return {f.engine: f.replicas for f in advice.flags}


def _flag(flags: list[EngineFlags], engine: str, name: str) -> str | None:
    for ef in flags:
        if ef.engine == engine:
            for f in ef.flags:
                if f.flag == name:
                    return f.value
    return None


def _backends(engine: str, advice: Advice, urls: Sequence[str]) -> list[dict[str, Any]]:
    cache: dict[str, Any]
    if engine == "llamacpp":
        slots = int(_flag(advice.flags, engine, "-np") or 4)
        ctx = int(_flag(advice.flags, engine, "-c") or 4096 * slots)
        cache = {"slots": slots, "capacity_tokens": ctx, "cache_ram_mib": 8192}
    else:
        cache = {"capacity_tokens": advice.hardware.pool_tokens}
    return [
        {
            "name": f"{engine}-{i + 1}",
            "url": url,
            "engine": engine,
            "pool": engine,
            "cache": dict(cache),
        }
        for i, url in enumerate(urls)
    ]


def _policy(d: ClassDecision) -> str:
    reps = d.capacity.replicas if d.capacity is not None else None
    if reps is not None and reps.cache_aware - reps.round_robin >= CACHE_AWARE_MIN_GAIN:
        return "cache_aware"
    return "least_outstanding"


def _route(d: ClassDecision) -> dict[str, Any]:
    route: dict[str, Any] = {"name": d.workload if d.workload != ALL else "all"}
    if d.workload != ALL:
        route["match"] = {"class": [d.workload]}
    moving = d.move is not Move.STAY
    route["pool"] = d.incumbent if moving else d.engine
    route["policy"] = _policy(d)
    if moving:
        route["canary"] = {"pool": d.engine, "weight": CANARY_WEIGHT, "sticky": "session"}
    return route


def gateway_engines(advice: Advice) -> list[str]:
    """Engines with a backend: the advised ones plus incumbents a canary starts from."""
    used = set(advice.engines)
    used.update(d.incumbent for d in advice.classes if d.move is not Move.STAY)
    return [e for e in ("vllm", "sglang", "llamacpp") if e in used]


def gateway_yaml(
    advice: Advice,
    urls: Mapping[str, Sequence[str]],
    *,
    exposed: bool,
    tokenizer: str | None = None,
) -> str:
    """``urls``: engine -> its replicas' URLs (:func:`replica_urls`); ``tokenizer``: the
    served model's (what advise tokenized with), for cache_aware routes and capture;
    None: the gateway's default model."""
    engines = gateway_engines(advice)
    routes = [_route(d) for d in advice.classes]
    if advice.scope != "single_engine":
        largest = max(advice.classes, key=lambda d: d.share_of_requests)
        routes.append({"name": "rest", "pool": largest.engine, "policy": _policy(largest)})
    doc: dict[str, Any] = {"listener": {"host": "127.0.0.1", "port": 8000}}
    if tokenizer:
        doc["tokenizer"] = tokenizer
    doc |= {
        "backends": [b for e in engines for b in _backends(e, advice, urls[e])],
        "routes": routes,
    }
    if exposed:
        doc["keys"] = [{"name": "replace-me", "sha256": NO_KEY_SHA256}]
    doc["capture"] = {"directory": "capture"}
    head = [
        "# kvroute gateway config written by `kvroute advise` (see advice.json for why).",
        "# Check it: kvroute serve --config gateway.yaml --check",
        "# Engines listen on 127.0.0.1 only (launch-*.sh); clients reach them through this gateway.",
    ]
    if exposed:
        head.append(
            '# keys: replace the placeholder with `echo -n "$KEY" | kvroute serve --hash-key`;'
            " until then no key is accepted."
        )
    else:
        head.append(
            "# keys: none (open on 127.0.0.1); add `keys: [{name: team, sha256: ...}]` before"
            " listening elsewhere."
        )
    head.append("# capture: live traffic as a hash-only trace, for the next `kvroute advise`.")
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=100)
