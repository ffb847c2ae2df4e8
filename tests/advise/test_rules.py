"""Feasibility rules: engines option, llama.cpp slots, tenant isolation, advisories."""

from __future__ import annotations

from advise.evidence_fixtures import hardware
from kvroute.advise.options import ENGINES, Exposure
from kvroute.advise.rules import Advisory, ClassFacts, feasibility, load_advisories

ADVISORY = Advisory("sglang", "CVE-X", "critical", "rce", "all", "ports on loopback")


def test_engines_option_excludes() -> None:
    f = feasibility(
        "sglang", ClassFacts("chat", 2, 1), hardware(), Exposure.INTERNAL, ("vllm",), []
    )
    assert not f.feasible and f.citations[0].outcome == "not considered"


def test_llamacpp_slots_or_small_hardware() -> None:
    busy = ClassFacts("chat", 17, 1)
    assert not feasibility("llamacpp", busy, hardware(), Exposure.INTERNAL, ENGINES, []).feasible
    assert feasibility(
        "llamacpp", busy, hardware("cpu", "smollm2-135m"), Exposure.INTERNAL, ENGINES, []
    ).feasible
    assert feasibility(
        "llamacpp", ClassFacts("chat", 16, 1), hardware(), Exposure.INTERNAL, ENGINES, []
    ).feasible


def test_an_advisory_is_a_condition_when_exposed_and_a_note_otherwise() -> None:
    facts = ClassFacts("agent", 2, 1)
    exposed = feasibility("sglang", facts, hardware(), Exposure.INTERNET, ENGINES, [ADVISORY])
    assert exposed.feasible and exposed.conditions == ["CVE-X: ports on loopback"]
    inside = feasibility("sglang", facts, hardware(), Exposure.INTERNAL, ENGINES, [ADVISORY])
    assert inside.feasible and inside.conditions == []
    assert inside.citations[-1].outcome == "noted"


def test_a_fixed_version_does_not_match() -> None:
    old = Advisory("vllm", "CVE-Y", "critical", "rce", "<0.10.0", "upgrade")
    assert not old.affects_version("0.32.0") and old.affects_version("0.9.2")


def test_shipped_advisories_load() -> None:
    ids = {a.id for a in load_advisories()}
    assert {"CVE-2025-30165", "CVE-2026-3059"} <= ids
