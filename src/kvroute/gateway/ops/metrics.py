"""The gateway's metrics, named the way engines name theirs (``kvroute:`` prefix,
vLLM's ``time_to_first_token_seconds`` family), and what one finished request adds.

Labels: ``backend``, ``pool``, ``class`` (workload), ``policy``; requests also by
``code`` (HTTP status), errors by ``kind``. Latency buckets start at 1 ms so the
gateway's own sub-100 ms behaviour is visible. Upstream engines' cache counters are
re-exported per backend from the health checker's last scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvroute.gateway.access.limits import AdmissionGate
from kvroute.gateway.backends.backend import Backend
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.ops.prometheus import Counter, Gauge, Histogram, MirroredCounter, render
from kvroute.gateway.types import RequestContext

LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)
TPOT_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.015,
    0.02,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
)
ROUTE_LABELS = ("backend", "pool", "class", "policy")


class GatewayMetrics:
    """Every metric the gateway exports. One instance per gateway; no globals."""

    def __init__(self) -> None:
        self.requests = Counter(
            "kvroute:requests_total",
            "Requests answered, by route and HTTP status.",
            (*ROUTE_LABELS, "code"),
        )
        self.errors = Counter(
            "kvroute:errors_total", "Errors by kind (client-caused and upstream).", ("kind",)
        )
        self.upstream_failures = Counter(
            "kvroute:upstream_failures_total",
            "Failed upstream attempts, by backend and kind.",
            ("backend", "kind"),
        )
        self.retries = Counter(
            "kvroute:retries_total", "Attempts beyond the first, by backend tried.", ("backend",)
        )
        self.ttft = Histogram(
            "kvroute:time_to_first_token_seconds",
            "Gateway receipt to the first streamed token leaving for the client.",
            ROUTE_LABELS,
            LATENCY_BUCKETS_S,
        )
        self.tpot = Histogram(
            "kvroute:time_per_output_token_seconds",
            "Mean time per output token after the first (streams with usage).",
            ROUTE_LABELS,
            TPOT_BUCKETS_S,
        )
        self.e2e = Histogram(
            "kvroute:e2e_request_latency_seconds",
            "Gateway receipt to the last byte of the answer.",
            ROUTE_LABELS,
            LATENCY_BUCKETS_S,
        )
        self.prompt_tokens = Counter(
            "kvroute:prompt_tokens_total",
            "Prompt tokens reported by upstream usage.",
            ROUTE_LABELS,
        )
        self.generation_tokens = Counter(
            "kvroute:generation_tokens_total",
            "Completion tokens reported by upstream usage.",
            ROUTE_LABELS,
        )
        self.cached_tokens = Counter(
            "kvroute:cached_prompt_tokens_total",
            "Prompt tokens the engine took from its prefix cache, per response.",
            ROUTE_LABELS,
        )
        self.in_flight = Gauge("kvroute:requests_in_flight", "Requests being answered.")
        self.queued = Gauge("kvroute:requests_queued", "Requests waiting for admission.")
        self.backend_up = Gauge(
            "kvroute:backend_up",
            "1 when the backend's last health probes pass.",
            ("backend", "pool", "engine"),
        )
        self.backend_outstanding = Gauge(
            "kvroute:backend_outstanding_requests",
            "Requests sent to the backend, not done.",
            ("backend",),
        )
        self.breaker_state = Gauge(
            "kvroute:backend_breaker_state", "0 closed, 1 open, 2 half-open.", ("backend",)
        )
        self.breaker_opened = MirroredCounter(
            "kvroute:backend_breaker_opened_total",
            "Times the breaker opened (since the gateway started).",
            ("backend",),
        )
        self.engine_prompt_tokens = MirroredCounter(
            "kvroute:engine_prompt_tokens_total",
            "The engine's own cumulative prompt-token counter (from its /metrics).",
            ("backend", "engine"),
        )
        self.engine_cached_tokens = MirroredCounter(
            "kvroute:engine_cached_prompt_tokens_total",
            "The engine's own cumulative prefix-cache hit tokens (from its /metrics).",
            ("backend", "engine"),
        )
        self.reloads = Counter(
            "kvroute:config_reloads_total", "Config reloads, by outcome.", ("outcome",)
        )
        self.capture_records = MirroredCounter(
            "kvroute:capture_records_total",
            "Captured requests: written to the trace, dropped (queue full), failed.",
            ("outcome",),
        )

    def all(self) -> list[Counter | Gauge | Histogram]:
        return [
            self.requests,
            self.errors,
            self.upstream_failures,
            self.retries,
            self.ttft,
            self.tpot,
            self.e2e,
            self.prompt_tokens,
            self.generation_tokens,
            self.cached_tokens,
            self.in_flight,
            self.queued,
            self.backend_up,
            self.backend_outstanding,
            self.breaker_state,
            self.breaker_opened,
            self.engine_prompt_tokens,
            self.engine_cached_tokens,
            self.reloads,
            self.capture_records,
        ]

    def observe(self, ctx: RequestContext, status: int) -> None:
        """Record one finished request (called once, when its last byte is written)."""
        route = (ctx.backend, ctx.pool, ctx.workload.value if ctx.workload else "", ctx.policy)
        self.requests.inc((*route, str(status)))
        if ctx.error_kind:
            self.errors.inc((ctx.error_kind,))
        if not ctx.backend:
            return
        if ctx.ttft_s is not None:
            self.ttft.observe(route, ctx.ttft_s)
        if ctx.e2e_s is not None:
            self.e2e.observe(route, ctx.e2e_s)
            if ctx.ttft_s is not None and ctx.completion_tokens and ctx.completion_tokens > 1:
                self.tpot.observe(route, (ctx.e2e_s - ctx.ttft_s) / (ctx.completion_tokens - 1))
        if ctx.prompt_tokens:
            self.prompt_tokens.inc(route, ctx.prompt_tokens)
        if ctx.completion_tokens:
            self.generation_tokens.inc(route, ctx.completion_tokens)
        if ctx.cached_tokens:
            self.cached_tokens.inc(route, ctx.cached_tokens)

    def exposition(
        self,
        backends: Callable[[], Sequence[Backend]],
        gate: AdmissionGate,
        capture: TraceCapture | None = None,
    ) -> bytes:
        def collect() -> None:
            self.in_flight.set((), gate.num_in_flight)
            self.queued.set((), gate.num_queued)
            if capture is not None:
                self.capture_records.set(("written",), capture.num_written)
                self.capture_records.set(("dropped",), capture.num_dropped)
                self.capture_records.set(("failed",), capture.num_failed)
            for metric in (
                self.backend_up,
                self.backend_outstanding,
                self.breaker_state,
                self.breaker_opened,
                self.engine_prompt_tokens,
                self.engine_cached_tokens,
            ):
                metric.values.clear()  # only backends configured now
            for b in backends():
                c = b.config
                self.backend_up.set((c.name, c.pool, c.engine), 1.0 if b.healthy else 0.0)
                self.backend_outstanding.set((c.name,), b.num_outstanding)
                state = b.breaker.state
                self.breaker_state.set((c.name,), float(state.value))
                self.breaker_opened.set((c.name,), b.breaker.num_opened)
                counters = b.cache_counters
                if counters is not None and counters.prompt_tokens is not None:
                    self.engine_prompt_tokens.set((c.name, c.engine), counters.prompt_tokens)
                if counters is not None and counters.cached_tokens is not None:
                    self.engine_cached_tokens.set((c.name, c.engine), counters.cached_tokens)

        return render(self.all(), [collect])
