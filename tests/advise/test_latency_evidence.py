"""Latency evidence: SLO attainment from kvroute predict decides the engine, and hits
stand in, saying why, where predict cannot run."""

from __future__ import annotations

import numpy as np
import pytest

from advise.evidence_fixtures import hardware
from kvroute.advise.hit_evidence import HitEvidence
from kvroute.advise.latency_evidence import PredictEvidence
from kvroute.advise.options import AdviseOptions, Ops, Team, parse_slo
from kvroute.advise.registry import EvidenceSetup, choose_evidence
from kvroute.advise.run import TraceSourceInfo, advise
from kvroute.errors import UsageError
from kvroute.gateway.types import WorkloadClass
from kvroute.trace.records import Request, TokenPrompt

SOURCE = TraceSourceInfo("t.jsonl", "openai", "tok")
TIGHT = "ttft_p99=1s,tpot_p99=60ms"
LOOSE = "ttft_p99=120s,tpot_p99=2s"


def busy_trace(n: int = 120, rate_per_s: float = 12.0) -> list[Request]:
    """Distinct 2000-token prompts arriving at ``rate_per_s``, 200 tokens out each, logged
    as done a second later: about 12 in flight, within llama.cpp's 16-slot feasibility
    rule, but more than its 4 default slots keep up with."""
    return [
        Request(
            prompt=TokenPrompt(np.arange(2000, dtype=np.uint32) + 100_000 * i),
            arrival_s=i / rate_per_s,
            end_s=i / rate_per_s + 1.0,
            output_len=200,
        )
        for i in range(n)
    ]


def run(slo: str, requests: list[Request], gpu: str = "h100-80gb"):  # type: ignore[no-untyped-def]
    options = AdviseOptions(team=Team(1, Ops.HIGH), slo=parse_slo(slo), min_trace_requests=50)
    hw = hardware(gpu)
    choice = choose_evidence(None, EvidenceSetup(options.slo, num_samples=2), requests, hw)
    labels = [WorkloadClass.CHAT] * len(requests)
    return advise(
        requests,
        labels,
        SOURCE,
        hw,
        options,
        choice.evidence,
        [],
        evidence_fallback=choice.fallback,
    )


def test_a_tight_slo_avoids_the_engine_that_saturates_and_cites_the_target() -> None:
    advice = run(TIGHT, busy_trace())
    (d,) = advice.classes
    assert advice.inputs.evidence == "slo_attainment"
    assert d.engine != "llamacpp"
    llama = next(s for s in d.scores if s.engine == "llamacpp")
    assert llama.latency is not None and llama.latency.saturated
    assert llama.latency.ttft_p99_s is not None and llama.latency.ttft_p99_s > 1.0
    assert llama.value < 0.5
    # llama.cpp was feasible: the SLO, not a rule, kept it out
    feas = next(f for f in d.feasibility if f.engine == "llamacpp")
    assert feas.feasible
    cited = [c for c in d.citations if c.rule == "slo_target" and "scores[llamacpp]" in c.field]
    ttft = next(c for c in cited if c.field.endswith("[ttft_p99]"))
    assert ttft.outcome == "misses (saturated)"
    assert ttft.threshold == ">= 99 % of requests (ttft_p99)"
    assert "misses the SLO: llama.cpp (ttft_p99" in d.headline and "saturated)" in d.headline
    assert d.capacity is not None  # capacity advice still replays cache hits


def test_a_loose_slo_gives_a_tie_and_the_tie_goes_to_vllm() -> None:
    advice = run(LOOSE, busy_trace(rate_per_s=2.0))
    (d,) = advice.classes
    assert d.engine == "vllm"
    assert all(s.value == 1.0 for s in d.scores)
    assert "equal" in d.headline and "misses" not in d.headline


def test_when_no_engine_meets_the_slo_the_headline_says_so() -> None:
    advice = run("ttft_p99=1ms", busy_trace(n=60))
    (d,) = advice.classes
    assert d.engine == "vllm"
    assert "no engine meets the SLO at this load" in d.headline


def test_every_score_reports_predicted_percentiles_and_whether_it_uses_a_prior() -> None:
    advice = run(TIGHT, busy_trace(n=60))
    for s in advice.classes[0].scores:
        assert s.latency is not None
        assert s.latency.ttft_p50_s is not None and s.latency.tpot_p99_s is not None
        assert set(s.latency.attainment) == {"ttft_p99", "tpot_p99"}
    if any(s.latency and s.latency.uses_prior for s in advice.classes[0].scores):
        assert any(n.startswith("uses_prior") for n in advice.notes)


def test_without_speed_data_it_falls_back_to_hits_and_says_why() -> None:
    advice = run(TIGHT, busy_trace(n=60), gpu="l4")
    assert advice.inputs.evidence == "prefill_saved"
    assert advice.inputs.evidence_fallback is not None
    assert "GPU 'l4' has no speed data" in advice.inputs.evidence_fallback
    assert any("--slo is not scored" in n for n in advice.notes)


def test_a_trace_without_prompt_lengths_falls_back_to_hits() -> None:
    empty = [Request(prompt=TokenPrompt(np.zeros(0, dtype=np.uint32))) for _ in range(5)]
    choice = choose_evidence(None, EvidenceSetup(parse_slo(TIGHT)), empty, hardware())
    assert isinstance(choice.evidence, HitEvidence)
    assert choice.fallback is not None and "token counts" in choice.fallback


def test_the_cpu_testbed_is_predicted_on_its_preset_with_priors() -> None:
    advice = run(LOOSE, busy_trace(n=60, rate_per_s=0.5), gpu="cpu")
    assert advice.inputs.evidence == "slo_attainment"
    scores = advice.classes[0].scores
    assert all(s.latency is not None and s.latency.uses_prior for s in scores)
    assert any(n.startswith("uses_prior") for n in advice.notes)


def test_hits_stay_the_default_without_slo() -> None:
    choice = choose_evidence(None, EvidenceSetup(), busy_trace(n=10), hardware())
    assert isinstance(choice.evidence, HitEvidence) and choice.fallback is None


def test_latency_evidence_without_slo_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--slo"):
        choose_evidence("latency", EvidenceSetup(), busy_trace(n=10), hardware())
    with pytest.raises(UsageError, match="--slo"):
        PredictEvidence(())
