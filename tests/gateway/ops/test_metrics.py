from __future__ import annotations

import json
import re
from pathlib import Path

from kvroute.gateway.ops.metrics import GatewayMetrics
from kvroute.gateway.types import RequestContext, WorkloadClass

DASHBOARD = Path(__file__).parents[3] / "docs" / "grafana-kvroute.json"


def test_observe_one_stream() -> None:
    m = GatewayMetrics()
    ctx = RequestContext(
        workload=WorkloadClass.AGENT,
        pool="p",
        policy="round_robin",
        backend="b",
        ttft_s=0.05,
        e2e_s=0.55,
        completion_tokens=11,
        prompt_tokens=100,
        cached_tokens=64,
    )
    m.observe(ctx, 200)
    assert m.requests.values == {("b", "p", "agent", "round_robin", "200"): 1.0}
    assert m.cached_tokens.values[("b", "p", "agent", "round_robin")] == 64
    counts, total = m.tpot.values[("b", "p", "agent", "round_robin")]
    assert sum(counts) == 1 and abs(total[0] - 0.05) < 1e-9  # (0.55 - 0.05) / 10


def test_the_dashboard_uses_only_exported_metrics() -> None:
    from kvroute.gateway.traffic.status import TrafficMetrics

    exported = {metric.name for metric in GatewayMetrics().all()}
    live = {m.name for m in vars(TrafficMetrics()).values() if hasattr(m, "name")}
    exported |= live
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    used = {re.sub(r"_bucket$", "", n) for e in exprs for n in re.findall(r"kvroute:[a-z0-9_]+", e)}
    assert used and used <= exported
    # kvroute's own live view is graphed, not only the request counters.
    assert {
        "kvroute:traffic_prefix_overlap_ratio",
        "kvroute:traffic_overlap_band",
        "kvroute:cache_prediction_error_ratio",
    } <= used
