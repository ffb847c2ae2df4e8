"""The alert rules' state machine: band edges with hysteresis, class mix, migrate on a canary."""

from __future__ import annotations

from dataclasses import replace

import yaml

from advise.evidence_fixtures import FakeEvidence, class_input, context, flat
from kvroute.advise.alerts import alert_rules, alerts_yaml
from kvroute.advise.decide import decide
from kvroute.advise.result import Advice
from kvroute.advise.run import TraceSourceInfo, advise
from kvroute.advise.workload import classify_trace
from kvroute.gateway.types import WorkloadClass


def advice_for(sglang: float, overlap_class: float = 0.5) -> Advice:
    ev = FakeEvidence({"llamacpp": flat(0.2), "vllm": flat(0.5), "sglang": flat(sglang)})
    ctx = context(ev)
    inp = class_input(name="agent", overlap=overlap_class)
    base = advise(
        inp.requests,
        [WorkloadClass.AGENT] * len(inp.requests),
        TraceSourceInfo("t", "x", None),
        ctx.hardware,
        ctx.options,
        ev,
        [],
    )
    return replace(base, classes=decide([inp], ctx))


def rules(a: Advice) -> list[dict[str, object]]:
    return alert_rules(a)["groups"][0]["rules"]  # type: ignore[no-any-return]


def test_states_and_hysteresis() -> None:
    a = advice_for(0.52)  # stays on vLLM
    by_name = {r.get("alert"): r for r in rules(a)}
    assert by_name["KvrouteAdviseWatch"]["labels"] == {"severity": "info", "state": "watch"}
    assert by_name["KvrouteAdviseCanary"]["labels"]["state"] == "canary"  # type: ignore[index]
    assert "KvrouteAdviseMigrate" not in by_name  # nothing to migrate to
    # the constructed prompts share nothing (overlap 0: the < 40 % band), so watch fires
    # 5 pp above the band's edge and canary 10 pp above it, after longer: hysteresis
    assert str(by_name["KvrouteAdviseWatch"]["expr"]).endswith("> 0.45")
    assert str(by_name["KvrouteAdviseCanary"]["expr"]).endswith("> 0.50")
    assert (
        by_name["KvrouteAdviseWatch"]["for"] == "30m"
        and by_name["KvrouteAdviseCanary"]["for"] == "6h"
    )
    assert all(r.get("keep_firing_for") == "1h" for r in rules(a) if "alert" in r)


def test_a_proposed_move_gets_a_migrate_rule_on_the_canary() -> None:
    a = advice_for(0.7)
    migrate = [r for r in rules(a) if r.get("alert") == "KvrouteAdviseMigrate"]
    assert len(migrate) == 1
    expr = str(migrate[0]["expr"])
    assert 'pool="sglang"' in expr and 'pool="vllm"' in expr and expr.endswith("> 0.050")
    assert yaml.safe_load(alerts_yaml(a)) == alert_rules(a)


def test_classify_trace_default_options() -> None:
    assert classify_trace(class_input(n=2).requests) == [WorkloadClass.COMPLETION] * 2
