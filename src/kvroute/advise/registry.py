"""Evidence sources by name: ``--evidence`` picks one; without it, ``latency`` when
``--slo`` is given and ``hits`` otherwise. :func:`choose_evidence` falls back to hits,
saying why, where predict cannot run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kvroute.advise.base import LatencyEvidence
from kvroute.advise.hardware import Hardware
from kvroute.advise.hit_evidence import HitEvidence
from kvroute.advise.latency_evidence import DEFAULT_SAMPLES, PredictEvidence, latency_unusable
from kvroute.advise.options import SloTarget
from kvroute.predict.calibration import Calibration
from kvroute.registry import Registry
from kvroute.trace.records import Request

HITS = "hits"
LATENCY = "latency"
DEFAULT_EVIDENCE = HITS


@dataclass(frozen=True, slots=True)
class EvidenceSetup:
    """What an evidence source may read of the user's options."""

    slo: tuple[SloTarget, ...] = ()
    calibrations: Mapping[str, Calibration] = field(default_factory=dict)
    num_samples: int = DEFAULT_SAMPLES


def _latency(setup: EvidenceSetup) -> LatencyEvidence:
    return PredictEvidence(setup.slo, setup.calibrations, setup.num_samples)


def evidence_sources() -> Registry[Callable[[EvidenceSetup], LatencyEvidence]]:
    """``hits``: prefill saved, from the prefix-cache models at the pool (hit_evidence.py);
    ``latency``: SLO attainment from kvroute predict (latency_evidence.py)."""
    reg: Registry[Callable[[EvidenceSetup], LatencyEvidence]] = Registry("advise evidence")
    reg.add(HITS, lambda _setup: HitEvidence())
    reg.add(LATENCY, _latency)
    return reg


@dataclass(frozen=True, slots=True)
class EvidenceChoice:
    evidence: LatencyEvidence
    fallback: str | None
    """Why latency evidence was asked for but hits are scored; None when it was not."""


def default_evidence_name(slo: Sequence[SloTarget]) -> str:
    return LATENCY if slo else HITS


def choose_evidence(
    name: str | None, setup: EvidenceSetup, requests: Sequence[Request], hardware: Hardware
) -> EvidenceChoice:
    """The source ``name`` (default by ``setup.slo``); latency falls back to hits where
    predict cannot run on these requests and this hardware (the reason is kept)."""
    chosen = name or default_evidence_name(setup.slo)
    evidence = evidence_sources().get(chosen)(setup)  # checks the setup (latency: --slo)
    if chosen == LATENCY:
        why = latency_unusable(requests, hardware)
        if why is not None:
            return EvidenceChoice(HitEvidence(), why)
    return EvidenceChoice(evidence, None)
