"""Prometheus alert rules that re-make the decision as traffic changes. Pure.

The advice holds for the overlap and class mix it was made on. The gateway exports
both live (``kvroute:traffic_prefix_overlap_ratio``, ``kvroute:traffic_class_share``),
and the canary's cache hit per pool. The rules walk a migration state machine::

    stay ──(overlap leaves the advice's band by WATCH_PP for WATCH_FOR,
            or a class's share moves by MIX_SHIFT)──> watch
    watch ──(overlap beyond the band by CANARY_PP for CANARY_FOR)──> canary
    canary ──(canary pool's hit beats the primary's by the margin for MIGRATE_FOR)──> migrate

Each state is an alert whose ``state`` label names it. Hysteresis: entering needs the
overlap past the band edge *plus* a distance, held for a duration, and every alert keeps
firing for ``keep_firing_for`` after its condition clears, so a value that hovers at an
edge does not flap. Going back to stay is the alerts resolving. ``migrate`` means: rerun
``kvroute advise`` on the capture and apply its gateway.yaml.
"""

from __future__ import annotations

from typing import Any

import yaml

from kvroute.advise.options import Ops, Team
from kvroute.advise.result import Advice, Move
from kvroute.advise.scoring import switching_margin
from kvroute.analyze.result import EQUIVALENT_BELOW, RADIX_ABOVE

WATCH_PP = 0.05
WATCH_FOR = "30m"
CANARY_PP = 0.10
CANARY_FOR = "6h"
MIGRATE_FOR = "24h"
MIX_SHIFT = 0.15
KEEP_FIRING = "1h"
OVERLAP_1H = "kvroute:advise_prefix_overlap:avg1h"


def _band_edges(overlap: float) -> tuple[float, float]:
    """The overlap range of the band the advice was made in."""
    if overlap < EQUIVALENT_BELOW:
        return 0.0, EQUIVALENT_BELOW
    if overlap > RADIX_ABOVE:
        return RADIX_ABOVE, 1.0
    return EQUIVALENT_BELOW, RADIX_ABOVE


def _outside(lo: float, hi: float, distance: float) -> str:
    parts = []
    if lo - distance > 0:
        parts.append(f"{OVERLAP_1H} < {lo - distance:.2f}")
    if hi + distance < 1:
        parts.append(f"{OVERLAP_1H} > {hi + distance:.2f}")
    return " or ".join(parts) if parts else "vector(0) > 1"


def _hit(pool: str) -> str:
    return (
        f'sum(rate(kvroute:cached_prompt_tokens_total{{pool="{pool}"}}[1h])) / '
        f'sum(rate(kvroute:prompt_tokens_total{{pool="{pool}"}}[1h]))'
    )


def alert_rules(advice: Advice) -> dict[str, Any]:
    lo, hi = _band_edges(advice.trace.overlap)
    band = f"{lo:.0%}-{hi:.0%}"
    rules: list[dict[str, Any]] = [
        {"record": OVERLAP_1H, "expr": "avg_over_time(kvroute:traffic_prefix_overlap_ratio[1h])"},
        {
            "alert": "KvrouteAdviseWatch",
            "expr": _outside(lo, hi, WATCH_PP),
            "for": WATCH_FOR,
            "keep_firing_for": KEEP_FIRING,
            "labels": {"severity": "info", "state": "watch"},
            "annotations": {
                "summary": f"live prefix overlap left the {band} band the advice was made in "
                f"(advised at {advice.trace.overlap:.1%})",
                "action": "watch: rerun `kvroute advise` on the capture directory",
            },
        },
        {
            "alert": "KvrouteAdviseCanary",
            "expr": _outside(lo, hi, CANARY_PP),
            "for": CANARY_FOR,
            "keep_firing_for": KEEP_FIRING,
            "labels": {"severity": "warning", "state": "canary"},
            "annotations": {
                "summary": f"live prefix overlap {CANARY_PP * 100:.0f} pp beyond the {band} band "
                f"for {CANARY_FOR}",
                "action": "canary: rerun advise on the capture; give its proposed engine a "
                "route canary (weight 0.1)",
            },
        },
    ]
    for d in advice.classes:
        if d.workload == "all":
            continue
        rules.append(
            {
                "alert": "KvrouteAdviseClassMix",
                "expr": f'abs(avg_over_time(kvroute:traffic_class_share{{class="{d.workload}"}}[1h]) '
                f"- {d.share_of_requests:.3f}) > {MIX_SHIFT:.2f}",
                "for": WATCH_FOR,
                "keep_firing_for": KEEP_FIRING,
                "labels": {"severity": "info", "state": "watch", "class": d.workload},
                "annotations": {
                    "summary": f"class {d.workload} moved more than {MIX_SHIFT:.0%} from its "
                    f"advised share {d.share_of_requests:.1%}",
                    "action": "watch: rerun `kvroute advise` on the capture directory",
                },
            }
        )
    team = Team(advice.inputs.team_size, Ops(advice.inputs.ops))
    for d in advice.classes:
        if d.move is Move.STAY:
            continue
        margin = switching_margin(team, in_fleet=d.move is Move.SWITCH)
        rules.append(
            {
                "alert": "KvrouteAdviseMigrate",
                "expr": f"({_hit(d.engine)}) - ({_hit(d.incumbent)}) > {margin:.3f}",
                "for": MIGRATE_FOR,
                "keep_firing_for": KEEP_FIRING,
                "labels": {"severity": "warning", "state": "migrate", "class": d.workload},
                "annotations": {
                    "summary": f"the {d.engine} canary caches {margin * 100:.1f} pp more than "
                    f"{d.incumbent} for {MIGRATE_FOR}",
                    "action": f"migrate: move route {d.workload} to pool {d.engine} "
                    "(set it as the route's pool, drop the canary)",
                },
            }
        )
    return {"groups": [{"name": "kvroute-advise", "interval": "1m", "rules": rules}]}


def alerts_yaml(advice: Advice) -> str:
    head = (
        "# Prometheus rules written by `kvroute advise`: the stay -> watch -> canary -> migrate\n"
        "# state machine (docs/advise.md). Load with rule_files: [alerts.yaml].\n"
    )
    return head + yaml.safe_dump(alert_rules(advice), sort_keys=False, width=120)
