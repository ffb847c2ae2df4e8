"""Evidence sources by name: ``--evidence`` picks one. ``kvroute predict`` registers its
SLO-attainment evidence here, through the same path as the built-in."""

from __future__ import annotations

from collections.abc import Callable

from kvroute.advise.base import LatencyEvidence
from kvroute.advise.hit_evidence import HitEvidence
from kvroute.registry import Registry

DEFAULT_EVIDENCE = "hits"


def evidence_sources() -> Registry[Callable[[], LatencyEvidence]]:
    """``hits``: prefill saved, from the prefix-cache models at the pool (hit_evidence.py)."""
    reg: Registry[Callable[[], LatencyEvidence]] = Registry("advise evidence")
    reg.add(DEFAULT_EVIDENCE, HitEvidence)
    return reg
