"""Every decision rule on constructed evidence: margins, lower bounds, ties, the prior,
capacity as the lever, feasibility, small classes."""

from __future__ import annotations

import pytest

from advise.evidence_fixtures import FakeEvidence, class_input, context, flat
from kvroute.advise.decide import decide, decide_class
from kvroute.advise.options import Exposure, Ops
from kvroute.advise.result import Lever, Move
from kvroute.errors import UsageError


def shares(llamacpp: float, vllm: float, sglang: float, jitter: float = 0.0) -> FakeEvidence:
    return FakeEvidence(
        {"llamacpp": flat(llamacpp, jitter), "vllm": flat(vllm, jitter), "sglang": flat(sglang)}
    )


def test_a_clear_winner_is_added_with_its_margin_cited() -> None:
    d = decide_class(class_input(overlap=0.7), context(shares(0.3, 0.5, 0.6)), {"vllm"})
    assert d.engine == "sglang" and d.move is Move.ADD and d.lever is Lever.ENGINE
    rule = next(c for c in d.citations if c.rule == "switching_margin" and "sglang" in c.field)
    assert rule.outcome == "clears" and "5.0 pp" in rule.threshold
    assert d.prior.engine == "sglang" and d.prior.borne_out is True


def test_a_gain_below_the_margin_stays_with_vllm_and_the_prior_is_not_borne_out() -> None:
    # The case: 59 % overlap band says SGLang, but it only gains two points.
    d = decide_class(class_input(overlap=0.65), context(shares(0.3, 0.577, 0.599)), {"vllm"})
    assert d.engine == "vllm" and d.move is Move.STAY and d.lever is Lever.NONE
    assert d.prior.band == "radix_pays" and d.prior.borne_out is False
    assert "below the 5.0 pp margin" in d.headline


def test_ties_go_to_vllm() -> None:
    d = decide_class(class_input(overlap=0.2), context(shares(0.4, 0.4, 0.4)), {"vllm"})
    assert d.engine == "vllm" and d.move is Move.STAY
    assert d.prior.engine == "vllm" and d.prior.borne_out is True
    assert "equal on this evidence" in d.headline


@pytest.mark.parametrize(
    ("team", "ops", "moves"),
    [(1, Ops.MEDIUM, False), (3, Ops.LOW, False), (3, Ops.MEDIUM, True), (12, Ops.HIGH, True)],
)
def test_the_margin_grows_as_the_team_shrinks_and_ops_tolerance_falls(
    team: int, ops: Ops, moves: bool
) -> None:
    # SGLang +6 pp: enough for 3 people at medium ops (5 pp), not for 1 (10) or low ops (7.5).
    d = decide_class(class_input(), context(shares(0.3, 0.5, 0.56), team=team, ops=ops), {"vllm"})
    assert (d.engine == "sglang") is moves


def test_the_lower_bound_decides_not_the_estimate() -> None:
    # The same +6 pp on average, but per-request noise puts the lower bound under 5 pp.
    noisy = FakeEvidence({"llamacpp": flat(0.3), "vllm": flat(0.5, 0.45), "sglang": flat(0.56)})
    d = decide_class(class_input(n=200), context(noisy), {"vllm"})
    sg = next(s for s in d.scores if s.engine == "sglang")
    assert sg.vs_incumbent is not None and sg.vs_incumbent > 0.05
    assert sg.vs_incumbent_low is not None and sg.vs_incumbent_low < 0.05
    assert d.engine == "vllm" and not sg.clears_margin
    assert d.requests_to_decide is not None and d.requests_to_decide > 200


def test_an_engine_already_in_the_fleet_needs_half_the_margin() -> None:
    ev = shares(0.3, 0.5, 0.535)
    assert decide_class(class_input(), context(ev), {"vllm"}).engine == "vllm"
    d = decide_class(class_input(), context(ev), {"vllm", "sglang"})
    assert d.engine == "sglang" and d.move is Move.SWITCH


def test_the_incumbent_is_what_current_runs() -> None:
    d = decide_class(
        class_input(), context(shares(0.5, 0.52, 0.51), current={"chat": "llamacpp"}), {"llamacpp"}
    )
    assert d.incumbent == "llamacpp" and d.engine == "llamacpp" and d.move is Move.STAY


def test_llamacpp_is_out_where_its_slots_run_out_on_a_datacenter_gpu() -> None:
    ev = shares(0.9, 0.5, 0.5)
    busy = class_input(concurrency=40)
    d = decide_class(busy, context(ev), {"vllm"})
    llama = next(f for f in d.feasibility if f.engine == "llamacpp")
    assert not llama.feasible and d.engine == "vllm"
    assert next(c for c in llama.citations if c.rule == "llamacpp_slots").outcome == "slots run out"
    # the same class on a consumer card keeps llama.cpp
    assert decide_class(busy, context(ev, gpu="rtx4090"), {"vllm"}).engine == "llamacpp"
    # and a quiet class on the datacenter GPU too
    assert decide_class(class_input(concurrency=4), context(ev), {"vllm"}).engine == "llamacpp"


def test_multi_tenant_keeps_only_the_engine_that_isolates_tenants() -> None:
    ev = shares(0.9, 0.5, 0.9)
    d = decide_class(class_input(tenants=5), context(ev, exposure=Exposure.MULTI_TENANT), {"vllm"})
    assert [f.engine for f in d.feasibility if f.feasible] == ["vllm"]
    assert d.engine == "vllm"
    vllm = next(f for f in d.feasibility if f.engine == "vllm")
    assert any("cache_salt" in c for c in vllm.conditions)


def test_no_feasible_engine_is_one_usage_error() -> None:
    ctx = context(shares(0.5, 0.5, 0.5), exposure=Exposure.MULTI_TENANT)
    ctx = type(ctx)(
        ctx.hardware,
        type(ctx.options)(
            team=ctx.options.team, exposure=ctx.options.exposure, engines=("sglang",)
        ),
        ctx.evidence,
        [],
        {},
    )
    with pytest.raises(UsageError, match="no engine can serve the chat class"):
        decide_class(class_input(tenants=3), ctx, {"vllm"})


def test_capacity_leads_when_the_pool_is_far_below_the_ideal() -> None:
    # Mooncake-like: ideal 37 %, 4.5 % at the pool, rising with memory; engines within 1 pp.
    def grows(base: float) -> object:
        return lambda _i, cap: min(0.36, base * cap / 448_308)

    ev = FakeEvidence({"llamacpp": grows(0.04), "vllm": grows(0.045), "sglang": grows(0.05)})
    d = decide_class(class_input(overlap=0.37), context(ev), {"vllm"})  # type: ignore[arg-type]
    assert d.lever is Lever.CAPACITY and d.engine == "vllm"
    assert d.headline.startswith("chat: capacity, not the engine")
    c = d.capacity
    assert c is not None and c.pool_for_target_tokens is not None
    assert c.pool_for_target_tokens > c.pool_tokens
    assert c.value_with_fp8 is not None and c.value_with_fp8 > c.value_at_pool  # H100 has fp8
    assert c.replicas is not None and c.replicas.num_replicas == 8


def test_capacity_is_not_the_lever_when_the_pool_reaches_the_ideal() -> None:
    d = decide_class(class_input(overlap=0.5), context(shares(0.3, 0.49, 0.5)), {"vllm"})
    assert d.capacity is not None and d.capacity.lever is Lever.NONE
    assert d.capacity.pool_for_target_tokens is not None
    assert d.capacity.pool_for_target_tokens <= d.capacity.pool_tokens


def test_a_small_class_keeps_its_incumbent_and_says_how_many_requests_would_do() -> None:
    d = decide_class(class_input(n=20), context(shares(0.3, 0.3, 0.9)), {"vllm"})
    assert d.engine == "vllm" and d.requests_to_decide == 50
    assert next(c for c in d.citations if c.rule == "min_class_requests").outcome.startswith(
        "too few"
    )


def test_classes_are_decided_largest_first_and_share_the_fleet() -> None:
    ev = shares(0.3, 0.5, 0.535)  # +3.5 pp: below 5, above the fleet's 2.5
    big = class_input(name="agent", share=0.7)
    small = class_input(name="chat", share=0.3)
    # with SGLang in the fleet today, both classes take it at half the margin
    out = decide([small, big], context(ev, current={"agent": "sglang", "chat": "vllm"}))
    assert [d.workload for d in out] == ["agent", "chat"]
    assert out[0].engine == "sglang" and out[0].move is Move.STAY
    assert out[1].engine == "sglang" and out[1].move is Move.SWITCH


def test_a_small_class_does_not_test_the_prior() -> None:
    d = decide_class(class_input(n=20, overlap=0.9), context(shares(0.3, 0.5, 0.5)), {"vllm"})
    assert d.prior.engine == "sglang" and d.prior.borne_out is None
    assert d.prior.text.endswith("too few requests to test it")
