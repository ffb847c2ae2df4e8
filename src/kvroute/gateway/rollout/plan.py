"""Gray rollout: which side of a canary split a request takes, whether it is mirrored
to a shadow pool, and the side-by-side record of both (``/kvroute/rollout``, metrics).

A decision hashes a sticky key with the route's name (BLAKE2b, 64 bits) into [0, 1)
and compares it with the weight, so:

- the same session (or key, or request id) always lands on the same side;
- over many keys the canary's share is ``weight`` in expectation (binomial spread);
- raising the weight only moves primary sessions to the canary, never back;
- canary and shadow decisions are independent (different salts).

A canary pool with no available backend sends its share to the route's own pool
(``canary_unavailable`` in ``x-kvroute-route``), so a broken canary costs no errors.
"""

from __future__ import annotations

import enum
import hashlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.config.gateway import RouteConfig
from kvroute.gateway.config.rollout import StickyBy
from kvroute.gateway.errors import GatewayError
from kvroute.gateway.ops.metrics import LATENCY_BUCKETS_S
from kvroute.gateway.ops.prometheus import Counter, Gauge, Histogram, Metric, render
from kvroute.gateway.routing.routes import Route, candidates
from kvroute.stats import percentile

LATENCY_WINDOW = 4096
"""Latency samples kept per side for the percentiles of the comparison view."""
RECENT_PAIRS = 32
"""Mirrored requests listed one by one in the comparison view."""
CLIENT_DISCONNECT = "client_disconnect"


class Side(enum.Enum):
    PRIMARY = "primary"
    CANARY = "canary"
    SHADOW = "shadow"


def unit_hash(salt: str, key: str) -> float:
    """A uniform number in [0, 1) that depends only on ``salt`` and ``key``."""
    digest = hashlib.blake2b(f"{salt}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def sticky_key(sticky: StickyBy, session_key: str | None, key_name: str, request_id: str) -> str:
    if sticky is StickyBy.SESSION:
        if session_key:
            return f"session:{session_key}"
        if key_name:
            return f"key:{key_name}"
    return f"request:{request_id}"


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """One request's rollout decisions."""

    route: str
    side: Side
    pool: str | None
    """The pool to route in; None: the route's own."""
    shadow: bool
    has_canary: bool
    """The route has a canary (its record compares the two sides)."""
    detail: str = ""
    """What ``x-kvroute-route`` says about it."""


def plan_rollout(
    config: RouteConfig, session_key: str | None, key_name: str, request_id: str
) -> RolloutPlan | None:
    """The canary side and shadow decision for one request of route ``config``;
    None when the route has neither."""
    canary, shadow = config.canary, config.shadow
    if canary is None and shadow is None:
        return None
    side, pool, detail = Side.PRIMARY, None, ""
    if canary is not None:
        eligible = not canary.keys or key_name in canary.keys
        key = sticky_key(canary.sticky, session_key, key_name, request_id)
        if eligible and unit_hash(f"canary:{config.name}", key) < canary.weight:
            side, pool = Side.CANARY, canary.pool
        detail = f"canary={side.value}"
    mirrored = False
    if shadow is not None and (not shadow.keys or key_name in shadow.keys):
        key = sticky_key(shadow.sample, session_key, key_name, request_id)
        mirrored = unit_hash(f"shadow:{config.name}", key) < shadow.share
        detail = f"{detail} shadow={shadow.pool if mirrored else 'no'}".strip()
    return RolloutPlan(config.name, side, pool, mirrored, canary is not None, detail)


def rollout_candidates(
    route: Route,
    plan: RolloutPlan | None,
    backends: Sequence[Backend],
    model: str,
    now_s: float,
) -> tuple[RolloutPlan | None, list[Backend]]:
    """The available backends of the plan's pool, and the plan; the route's own pool
    when the canary pool has none (the plan returned then says so)."""
    if plan is None or plan.pool is None:
        return plan, candidates(route, backends, model, now_s)
    try:
        return plan, candidates(route, backends, model, now_s, pool=plan.pool)
    except GatewayError:
        detail = plan.detail.replace("canary=canary", "canary=primary canary_unavailable")
        fallback = replace(plan, side=Side.PRIMARY, pool=None, detail=detail)
        return fallback, candidates(route, backends, model, now_s)


# -- the record ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """One answer's measurements (the client's, or a shadow copy's)."""

    pool: str
    backend: str
    status: int
    error: str
    ttft_s: float | None
    e2e_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None

    @property
    def failed(self) -> bool:
        """The side's fault: an error status or failure (a client that left is not)."""
        if self.error == CLIENT_DISCONNECT:
            return False
        return bool(self.error) or not 200 <= self.status < 300

    def as_json(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "backend": self.backend,
            "status": self.status,
            "error": self.error or None,
            "ttft_ms": _ms(self.ttft_s),
            "e2e_ms": _ms(self.e2e_s),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
        }


class SideStats:
    """Counts, recent latencies and token sums of one side of a comparison."""

    __slots__ = (
        "cached_tokens",
        "e2e_s",
        "num_errors",
        "num_requests",
        "pools",
        "prompt_tokens",
        "ttft_s",
    )

    def __init__(self) -> None:
        self.num_requests = 0
        self.num_errors = 0
        self.ttft_s: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.e2e_s: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.prompt_tokens = 0
        """Prompt tokens of answers that also reported cached tokens (the hit rate's base)."""
        self.cached_tokens = 0
        self.pools: dict[str, int] = {}

    def add(self, sample: Sample) -> None:
        self.num_requests += 1
        self.num_errors += sample.failed
        self.pools[sample.pool] = self.pools.get(sample.pool, 0) + 1
        if sample.failed or sample.error == CLIENT_DISCONNECT:  # no latency to compare
            return
        if sample.ttft_s is not None:
            self.ttft_s.append(sample.ttft_s)
        if sample.e2e_s is not None:
            self.e2e_s.append(sample.e2e_s)
        if sample.prompt_tokens and sample.cached_tokens is not None:
            self.prompt_tokens += sample.prompt_tokens
            self.cached_tokens += sample.cached_tokens

    def summary(self) -> dict[str, object]:
        n = self.num_requests
        return {
            "requests": n,
            "errors": self.num_errors,
            "error_rate": round(self.num_errors / n, 4) if n else None,
            "ttft_p50_ms": _ms(percentile(self.ttft_s, 0.50)),
            "ttft_p99_ms": _ms(percentile(self.ttft_s, 0.99)),
            "e2e_p50_ms": _ms(percentile(self.e2e_s, 0.50)),
            "e2e_p99_ms": _ms(percentile(self.e2e_s, 0.99)),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_hit": round(self.cached_tokens / self.prompt_tokens, 4)
            if self.prompt_tokens
            else None,
            "pools": dict(sorted(self.pools.items())),
        }


@dataclass(slots=True)
class ShadowPair:
    """A mirrored request: the client's answer and the shadow copy's, as they arrive."""

    route: str
    request_id: str
    primary: Sample | None = None
    shadow: Sample | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "request_id": self.request_id,
            "primary": self.primary.as_json() if self.primary else None,
            "shadow": self.shadow.as_json() if self.shadow else None,
        }


class RouteRecord:
    __slots__ = ("canary", "num_dropped", "pairs", "shadow")

    def __init__(self) -> None:
        self.canary = {Side.PRIMARY: SideStats(), Side.CANARY: SideStats()}
        self.shadow = {Side.PRIMARY: SideStats(), Side.SHADOW: SideStats()}
        self.pairs: deque[ShadowPair] = deque(maxlen=RECENT_PAIRS)
        self.num_dropped: dict[str, int] = {}


class RolloutStats:
    """Everything recorded about canary and shadow traffic, per route name; survives
    reloads (a route keeps its record while its name stays). Single-threaded."""

    def __init__(self) -> None:
        self.routes: dict[str, RouteRecord] = {}
        self.num_shadow_in_flight = 0
        labels = ("route", "side", "pool")
        self.canary_requests = Counter(
            "kvroute:canary_requests_total",
            "Answered requests of routes with a canary, by side (primary/canary) and pool.",
            (*labels, "code"),
        )
        self.shadow_requests = Counter(
            "kvroute:shadow_requests_total",
            "Mirrored requests by side (primary: the client's answer, shadow: the copy's) "
            "and outcome (ok, error; shadow also dropped_busy, no_backend).",
            (*labels, "outcome"),
        )
        self.shadow_ttft = Histogram(
            "kvroute:shadow_time_to_first_token_seconds",
            "Mirrored requests: time to first token of the client's answer and of the copy.",
            labels,
            LATENCY_BUCKETS_S,
        )
        self.shadow_e2e = Histogram(
            "kvroute:shadow_e2e_request_latency_seconds",
            "Mirrored requests: end-to-end latency of the client's answer and of the copy.",
            labels,
            LATENCY_BUCKETS_S,
        )
        self.shadow_prompt_tokens = Counter(
            "kvroute:shadow_prompt_tokens_total",
            "Mirrored requests: prompt tokens (of answers that report cached tokens).",
            labels,
        )
        self.shadow_cached_tokens = Counter(
            "kvroute:shadow_cached_prompt_tokens_total",
            "Mirrored requests: prompt tokens served from the engine's prefix cache.",
            labels,
        )
        self.shadow_in_flight = Gauge(
            "kvroute:shadow_requests_in_flight", "Shadow copies being sent or read."
        )

    def route(self, name: str) -> RouteRecord:
        record = self.routes.get(name)
        if record is None:
            record = self.routes[name] = RouteRecord()
        return record

    def served(self, plan: RolloutPlan, sample: Sample, has_canary: bool) -> None:
        """The client's answer of a request with a rollout plan has ended."""
        if has_canary:
            self.route(plan.route).canary[plan.side].add(sample)
            labels = (plan.route, plan.side.value, sample.pool, str(sample.status))
            self.canary_requests.inc(labels)

    def mirrored(self, pair: ShadowPair, side: Side, sample: Sample) -> None:
        """One side of a mirrored request has ended (``side`` primary or shadow)."""
        record = self.route(pair.route)
        if side is Side.SHADOW:
            pair.shadow = sample
        else:
            pair.primary = sample
        record.shadow[side].add(sample)
        labels = (pair.route, side.value, sample.pool)
        left = sample.error == CLIENT_DISCONNECT
        outcome = "error" if sample.failed else CLIENT_DISCONNECT if left else "ok"
        self.shadow_requests.inc((*labels, outcome))
        if sample.failed or left:
            return
        if sample.ttft_s is not None:
            self.shadow_ttft.observe(labels, sample.ttft_s)
        if sample.e2e_s is not None:
            self.shadow_e2e.observe(labels, sample.e2e_s)
        if sample.prompt_tokens and sample.cached_tokens is not None:
            self.shadow_prompt_tokens.inc(labels, sample.prompt_tokens)
            self.shadow_cached_tokens.inc(labels, sample.cached_tokens)

    def new_pair(self, route: str, request_id: str) -> ShadowPair:
        pair = ShadowPair(route, request_id)
        self.route(route).pairs.append(pair)
        return pair

    def dropped(self, route: str, pool: str, reason: str) -> None:
        """A copy that was never sent (``dropped_busy``, ``no_backend``)."""
        drops = self.route(route).num_dropped
        drops[reason] = drops.get(reason, 0) + 1
        self.shadow_requests.inc((route, Side.SHADOW.value, pool, reason))

    def exposition(self) -> bytes:
        def collect() -> None:
            self.shadow_in_flight.set((), self.num_shadow_in_flight)

        metrics: list[Metric] = [
            self.canary_requests,
            self.shadow_requests,
            self.shadow_ttft,
            self.shadow_e2e,
            self.shadow_prompt_tokens,
            self.shadow_cached_tokens,
            self.shadow_in_flight,
        ]
        return render(metrics, [collect])

    def view(self, routes: Iterable[RouteConfig]) -> dict[str, object]:
        """The comparison view: per route with a canary or shadow, both sides."""
        out: list[dict[str, object]] = []
        for config in routes:
            if config.canary is None and config.shadow is None:
                continue
            record = self.route(config.name)
            entry: dict[str, object] = {"route": config.name, "pool": config.pool}
            if config.canary is not None:
                entry["canary"] = {
                    "pool": config.canary.pool,
                    "weight": config.canary.weight,
                    "sticky": config.canary.sticky.value,
                    "primary": record.canary[Side.PRIMARY].summary(),
                    "canary": record.canary[Side.CANARY].summary(),
                }
            if config.shadow is not None:
                entry["shadow"] = {
                    "pool": config.shadow.pool,
                    "share": config.shadow.share,
                    "dropped": dict(record.num_dropped),
                    "primary": record.shadow[Side.PRIMARY].summary(),
                    "shadow": record.shadow[Side.SHADOW].summary(),
                    "recent": [p.as_json() for p in record.pairs],
                }
            out.append(entry)
        return {"routes": out, "shadow_in_flight": self.num_shadow_in_flight}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
