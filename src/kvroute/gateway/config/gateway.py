"""The gateway config: YAML in, frozen dataclasses out, every error at its line.

See docs/gateway.md for the full schema with an example. Loading is pure apart from
reading the file and ``*_env`` variables; :func:`parse_config` takes the text.
Secrets never sit in the file in clear: client keys are stored as SHA-256 hex
(``kvroute serve --hash-key``), upstream keys are read from environment variables.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from kvroute.errors import InputError
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.gateway.config.capture import CaptureConfig
from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.config.reader import ConfigNode
from kvroute.gateway.config.rollout import CanaryConfig, ShadowConfig, parse_canary, parse_shadow
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.gateway.config.yaml_lines import load_yaml
from kvroute.gateway.routing.policies.registry import DEFAULT_POLICY, policy_registry
from kvroute.gateway.types import WorkloadClass

ENGINES = ("llamacpp", "vllm", "sglang")
ANY_POOL = "*"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 4 * 1024 * 1024
    drain_timeout_s: float = 30.0
    drain_grace_s: float = 0.0
    """SIGTERM: /ready answers 503 at least this long before the listener closes, even
    with nothing in progress, so load balancers stop sending traffic first."""
    access_log: bool = True
    route_headers: bool = True
    """Answer with ``x-kvroute-backend`` / ``x-kvroute-class`` headers."""
    head_timeout_s: float = 10.0
    """A request's head must arrive within this (from the connection or its first byte)."""
    body_timeout_s: float = 60.0
    """A request's body must arrive within this after its head."""
    keep_alive_s: float = 75.0
    max_connections: int = 4096
    """Open client connections; past it the longest-waiting idle one is closed."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = 2.0
    first_token_s: float = 60.0
    """Streaming: until the first body bytes; non-streaming: until the response head."""
    idle_s: float = 60.0
    """Streaming, after the first bytes: the longest silence between two pieces."""
    total_s: float = 600.0


@dataclass(frozen=True, slots=True)
class BackendConfig:
    name: str
    url: str
    engine: str
    models: tuple[str, ...] = ()
    """Model names it serves; empty: any (llama.cpp answers whatever is asked)."""
    pool: str = "default"
    tags: tuple[str, ...] = ()
    weight: float = 1.0
    api_key: str | None = field(default=None, repr=False)
    timeouts: Timeouts = Timeouts()
    cache: CacheViewConfig = field(default_factory=CacheViewConfig)
    """Its KV cache, for the gateway's cache view (cache_aware routes)."""

    def serves(self, model: str) -> bool:
        return not self.models or model in self.models


@dataclass(frozen=True, slots=True)
class RouteConfig:
    name: str
    pool: str
    policy: str = DEFAULT_POLICY
    policy_options: Mapping[str, object] = field(default_factory=dict)
    models: tuple[str, ...] = ()
    """Glob patterns on the requested model; empty: any."""
    classes: tuple[WorkloadClass, ...] = ()
    """Workload classes; empty: any."""
    upstream_model: str | None = None
    """Send this model name upstream instead of the requested one (an alias)."""
    canary: CanaryConfig | None = None
    """A weighted share of the route's traffic to another pool (rollout.py)."""
    shadow: ShadowConfig | None = None
    """A share of the route's requests mirrored to another pool, answers discarded."""

    def matches(self, model: str, workload: WorkloadClass) -> bool:
        if self.classes and workload not in self.classes:
            return False
        return not self.models or any(fnmatch.fnmatchcase(model, p) for p in self.models)


@dataclass(frozen=True, slots=True)
class KeyConfig:
    name: str
    sha256: str = field(repr=False)
    models: tuple[str, ...] = ("*",)
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def allows(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(model, p) for p in self.models)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_in_flight: int = 512
    max_queue: int = 1024
    queue_timeout_s: float = 10.0
    reserve_tokens: int = 512
    """Completion tokens a request without ``max_tokens`` reserves against its key's
    ``tokens_per_minute`` at admission (settled against its usage at the end)."""


@dataclass(frozen=True, slots=True)
class HealthConfig:
    interval_s: float = 5.0
    timeout_s: float = 2.0
    unhealthy_after: int = 2
    healthy_after: int = 1
    scrape_counters: bool = True


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = 3
    """Consecutive failures (connect errors, resets, timeouts, 502/503/504) to open."""
    open_s: float = 10.0


@dataclass(frozen=True, slots=True)
class RetryConfig:
    max_attempts: int = 3
    backoff_s: float = 0.02
    max_backoff_s: float = 0.5


@dataclass(frozen=True, slots=True)
class SessionConfig:
    header: str = "x-session-id"
    use_user_field: bool = True


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    backends: tuple[BackendConfig, ...]
    routes: tuple[RouteConfig, ...]
    listener: ListenerConfig = ListenerConfig()
    keys: tuple[KeyConfig, ...] = ()
    admin_key_sha256: str | None = field(default=None, repr=False)
    limits: LimitsConfig = LimitsConfig()
    health: HealthConfig = HealthConfig()
    breaker: BreakerConfig = BreakerConfig()
    retry: RetryConfig = RetryConfig()
    session: SessionConfig = SessionConfig()
    classify: ClassifyOptions = field(default_factory=ClassifyOptions)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    traffic: TrafficConfig = field(default_factory=TrafficConfig)
    """The live traffic-shape window (traffic_shape.py)."""
    tokenizer: str = ""
    """GGUF file or HF tokenizer directory of the served model, for cache_aware routes
    and capture; empty: the default model."""
    allow_no_keys: bool = False
    """A reload may drop every key (open a gateway that had keys) only with this set."""
    source: str = "<config>"


def load_config(path: Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read config: {exc.strerror}", path=str(path)) from None
    return parse_config(text, str(path), env=env)


def parse_config(text: str, path: str, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Validate ``text`` (YAML). Raises :class:`InputError` with ``path:line``."""
    data = load_yaml(text, path)
    if data is None:
        raise InputError("the config is empty; it needs at least 'backends'", path=path)
    root = ConfigNode(data, path, "", 1)
    root.check_keys(
        "listener",
        "backends",
        "routes",
        "keys",
        "admin",
        "limits",
        "health",
        "breaker",
        "retry",
        "session",
        "classify",
        "capture",
        "tokenizer",
        "traffic",
        "allow_no_keys",
    )
    env = os.environ if env is None else env
    # Every section and item is read even after an error, so all of them are reported
    # at once (ConfigNode.collect); a failed item is left out of what follows.
    backend_nodes = root.items("backends", required=True)
    backends = _collected(root, [partial(_backend, n, env) for n in backend_nodes])
    if not backend_nodes:
        raise root.error("needs at least one backend (an empty pool answers nothing)", "backends")
    root.collect(lambda: _unique(backends, "backend", path), None)
    # A backend with an error still names its pool, so routes to it are not refused too.
    pools = {b.pool for b in backends} | {
        n.data.get("pool", "default")
        for n in backend_nodes
        if isinstance(n.data.get("pool", ""), str)
    }
    routes = _collected(
        root, [partial(_route, n, i, pools) for i, n in enumerate(root.items("routes"))]
    )
    if not routes:
        routes = (RouteConfig(name="default", pool=ANY_POOL),)
    root.collect(lambda: _unique(routes, "route", path), None)
    keys = _collected(root, [partial(_key, n) for n in root.items("keys")])
    root.collect(lambda: _unique(keys, "key", path), None)
    admin = root.child("admin")
    admin.check_keys("key_sha256")
    config = GatewayConfig(
        backends=backends,
        routes=routes,
        listener=root.collect(lambda: _listener(root.child("listener")), ListenerConfig()),
        keys=keys,
        admin_key_sha256=admin.collect(lambda: admin.sha256("key_sha256", required=False), None),
        limits=LimitsConfig(**root.child("limits").fields(LimitsConfig, positive=True)),
        health=HealthConfig(**root.child("health").fields(HealthConfig, positive=True)),
        breaker=BreakerConfig(**root.child("breaker").fields(BreakerConfig, positive=True)),
        retry=RetryConfig(**root.child("retry").fields(RetryConfig, positive=True)),
        session=SessionConfig(**root.child("session").fields(SessionConfig)),
        classify=ClassifyOptions(**root.child("classify").fields(ClassifyOptions, positive=True)),
        capture=CaptureConfig(**root.child("capture").fields(CaptureConfig, positive=True)),
        traffic=root.collect(lambda: _traffic(root.child("traffic")), TrafficConfig()),
        tokenizer=root.collect(
            lambda: root.string("tokenizer") if "tokenizer" in root.data else "", ""
        ),
        allow_no_keys=root.collect(lambda: _flag(root, "allow_no_keys"), False),
        source=path,
    )
    root.raise_problems()
    return config


def _collected(root: ConfigNode, reads: list[Callable[[], T]]) -> tuple[T, ...]:
    """Each item read, the ones with an error recorded in ``root`` and left out."""
    missing = object()
    values = [root.collect(read, missing) for read in reads]
    return tuple(v for v in values if v is not missing)  # type: ignore[misc]


# -- sections ---------------------------------------------------------------------------


def _listener(node: ConfigNode) -> ListenerConfig:
    fields = node.fields(ListenerConfig, positive=True)
    port = fields.get("port", ListenerConfig().port)
    if not 0 <= int(port) <= 65535:
        raise node.error("must be a port number 0..65535", "port")
    return ListenerConfig(**fields)


def _traffic(node: ConfigNode) -> TrafficConfig:
    traffic = TrafficConfig(**node.fields(TrafficConfig, positive=True))
    if traffic.min_requests > traffic.window_requests:
        raise node.error(
            f"must be ≤ window_requests ({traffic.window_requests}), or no band is ever set",
            "min_requests",
        )
    return traffic


def _backend(node: ConfigNode, env: Mapping[str, str]) -> BackendConfig:
    node.check_keys(
        "name",
        "url",
        "engine",
        "model",
        "models",
        "pool",
        "tags",
        "weight",
        "api_key_env",
        "timeouts",
        "cache",
    )
    name = node.string("name")
    # A wrong url is recorded and the rest still read (the config is refused at the end).
    url = node.collect(lambda: _url(node), "")
    engine = node.string("engine")
    if engine not in ENGINES:
        raise node.error(f"unknown engine '{engine}' (valid: {', '.join(ENGINES)})", "engine")
    models = node.strings("models")
    if "model" in node.data:
        if models:
            raise node.error("give 'model' or 'models', not both", "model")
        models = (node.string("model"),)
    weight = node.number("weight", 1.0)
    if weight <= 0:
        raise node.error("must be > 0", "weight")
    api_key = None
    if "api_key_env" in node.data:
        var = node.string("api_key_env")
        api_key = env.get(var)
        if not api_key:
            raise node.error(f"environment variable {var} is not set", "api_key_env")
    return BackendConfig(
        name=name,
        url=url,
        engine=engine,
        models=models,
        pool=node.string("pool", "default"),
        tags=node.strings("tags"),
        weight=weight,
        api_key=api_key,
        timeouts=Timeouts(**node.child("timeouts").fields(Timeouts, positive=True)),
        cache=_cache_view(node.child("cache")),
    )


def _url(node: ConfigNode) -> str:
    url = node.string("url").rstrip("/")
    if not re.match(r"^http://[^/\s:]+(:\d+)?(/.*)?$", url):
        raise node.error(f"must be an http://host:port URL, got {url!r}", "url")
    return url


def _cache_view(node: ConfigNode) -> CacheViewConfig:
    """The engine's flags: ``slots`` --parallel, ``capacity_tokens`` --ctx-size, for
    llama.cpp ``kv_unified`` --[no-]kv-unified, ``cache_ram_mib`` --cache-ram, and for
    vLLM ``block_size_tokens`` --block-size."""
    node.check_keys("capacity_tokens", "slots", "kv_unified", "cache_ram_mib", "block_size_tokens")
    values: dict[str, Any] = {}
    for key in ("capacity_tokens", "slots", "block_size_tokens"):
        if key in node.data:
            values[key] = node.integer(key)
            if values[key] < 1:
                raise node.error("must be ≥ 1", key)
    if "kv_unified" in node.data:
        values["kv_unified"] = node.data["kv_unified"]
        if not isinstance(values["kv_unified"], bool):
            raise node.error("must be true or false (llama-server --kv-unified)", "kv_unified")
    if "cache_ram_mib" in node.data:
        values["cache_ram_mib"] = node.integer("cache_ram_mib")
        if values["cache_ram_mib"] < -1:
            raise node.error("must be ≥ -1 (--cache-ram: -1 no limit, 0 off)", "cache_ram_mib")
    return CacheViewConfig(**values)


def _route(node: ConfigNode, index: int, pools: set[str]) -> RouteConfig:
    node.check_keys(
        "name", "match", "pool", "policy", "policy_options", "upstream_model", "canary", "shadow"
    )
    pool = node.string("pool")
    if pool != ANY_POOL and pool not in pools:
        # recorded, and the rest of the route still read
        valid = ", ".join(sorted(pools))
        node.problems.append(
            node.error(f"no backend is in pool '{pool}' (pools: {valid}, or '*')", "pool")
        )
    policy = node.string("policy", DEFAULT_POLICY)
    registry = policy_registry()
    if policy not in registry:
        valid = ", ".join(sorted(registry.names()))
        raise node.error(f"unknown policy '{policy}' (valid: {valid})", "policy")
    options = node.child("policy_options").data
    try:
        registry.get(policy)(options)
    except ValueError as exc:
        raise node.error(str(exc), "policy_options") from None
    match = node.child("match")
    match.check_keys("model", "class")
    classes: list[WorkloadClass] = []
    valid_classes = [c.value for c in WorkloadClass]
    for name in match.strings("class"):
        if name not in valid_classes:
            raise match.error(
                f"unknown workload class '{name}' (valid: {', '.join(valid_classes)})", "class"
            )
        classes.append(WorkloadClass(name))
    upstream = node.string("upstream_model") if "upstream_model" in node.data else None
    return RouteConfig(
        name=node.string("name", f"route-{index}"),
        pool=pool,
        policy=policy,
        policy_options=dict(options),
        models=match.strings("model"),
        classes=tuple(classes),
        upstream_model=upstream,
        canary=parse_canary(node.child("canary"), pool, pools) if "canary" in node.data else None,
        shadow=parse_shadow(node.child("shadow"), pool, pools) if "shadow" in node.data else None,
    )


def _key(node: ConfigNode) -> KeyConfig:
    node.check_keys("name", "sha256", "models", "requests_per_minute", "tokens_per_minute")
    rpm = node.integer("requests_per_minute") if "requests_per_minute" in node.data else None
    tpm = node.integer("tokens_per_minute") if "tokens_per_minute" in node.data else None
    for value, key in ((rpm, "requests_per_minute"), (tpm, "tokens_per_minute")):
        if value is not None and value < 1:
            raise node.error("must be ≥ 1 (leave it out for no limit)", key)
    sha = node.sha256("sha256", required=True)
    assert sha is not None
    return KeyConfig(
        name=node.string("name"),
        sha256=sha,
        models=node.strings("models") or ("*",),
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
    )


def _flag(node: ConfigNode, key: str) -> bool:
    value = node.data.get(key, False)
    if not isinstance(value, bool):
        raise node.error("must be true or false", key)
    return value


def _unique(items: tuple[Any, ...], kind: str, path: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item.name in seen:
            raise InputError(f"two {kind}s are named '{item.name}'", path=path)
        seen.add(item.name)
