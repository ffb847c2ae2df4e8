"""The library entry point: scope by team size, the trace-size floor, tenant isolation,
and the grey-zone prior."""

from __future__ import annotations

import numpy as np
import pytest

from advise.evidence_fixtures import FakeEvidence, class_input, context, flat, hardware
from kvroute.advise.decide import decide_class
from kvroute.advise.options import AdviseOptions, Exposure, Ops, Team
from kvroute.advise.run import TraceSourceInfo, advise
from kvroute.advise.run import class_input as build_class_input
from kvroute.cache.replay.timing import TimingOptions
from kvroute.errors import InputError
from kvroute.gateway.types import WorkloadClass
from kvroute.trace.records import Request, TokenPrompt

SOURCE = TraceSourceInfo("t.jsonl", "openai", "tok")
EV = FakeEvidence({"llamacpp": flat(0.2), "vllm": flat(0.5), "sglang": flat(0.52)})


def labelled(n: int) -> tuple[list[Request], list[WorkloadClass]]:
    reqs = class_input(n).requests
    labels = [WorkloadClass.AGENT if i % 3 == 0 else WorkloadClass.CHAT for i in range(n)]
    return reqs, labels


def test_teams_of_three_route_per_class_and_smaller_ones_run_one_engine() -> None:
    reqs, labels = labelled(300)
    per_class = advise(
        reqs, labels, SOURCE, hardware(), AdviseOptions(team=Team(3, Ops.MEDIUM)), EV, []
    )
    assert per_class.scope == "per_class"
    assert [d.workload for d in per_class.classes] == ["chat", "agent"]
    one = advise(reqs, labels, SOURCE, hardware(), AdviseOptions(team=Team(2, Ops.MEDIUM)), EV, [])
    assert one.scope == "single_engine" and [d.workload for d in one.classes] == ["all"]
    assert (
        next(c for c in one.citations if c.rule == "route_per_class").outcome
        == "one engine for all traffic"
    )


def test_too_small_a_trace_is_an_input_error_saying_how_many() -> None:
    reqs, labels = labelled(40)
    with pytest.raises(
        InputError, match="40 requests are too few to decide on: advise needs at least 100"
    ):
        advise(reqs, labels, SOURCE, hardware(), AdviseOptions(), EV, [])


def test_multi_tenant_classes_are_scored_on_isolated_prompts() -> None:
    shared = np.arange(300, dtype=np.uint32)
    reqs = [Request(TokenPrompt(shared.copy()), user_id=f"tenant{i % 4}") for i in range(60)]
    opts = AdviseOptions(exposure=Exposure.MULTI_TENANT)
    inp = build_class_input("chat", reqs, 1.0, SOURCE, opts, TimingOptions())
    assert inp.num_tenants == 4
    # each tenant's first prompt is cold: 4 of 60 instead of 1 of 60
    assert inp.isolated_overlap == pytest.approx(56 / 60)
    assert inp.overlap == inp.isolated_overlap
    assert inp.requests[0].prompt is not reqs[0].prompt  # salted copies
    inside = build_class_input("chat", reqs, 1.0, SOURCE, AdviseOptions(), TimingOptions())
    assert inside.isolated_overlap is None and inside.overlap == pytest.approx(59 / 60, abs=1e-3)


def test_the_grey_zone_has_no_prior() -> None:
    d = decide_class(class_input(overlap=0.5), context(EV), {"vllm"})
    assert d.prior.band == "grey_zone" and d.prior.engine is None and d.prior.borne_out is None
