"""What the user tells ``kvroute advise`` about the team, the exposure and the SLO. Pure.

``parse_slo`` reads ``ttft_p99=1s,tpot_p99=60ms``; every other option is a small enum or
a number, checked here so the CLI maps one :class:`UsageError` to one line.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from kvroute.errors import UsageError

ENGINES = ("llamacpp", "vllm", "sglang")
DEFAULT_ENGINE = "vllm"
"""Ties go to vLLM: the best documented engine and the cheapest to run well."""


class Ops(enum.Enum):
    """How much operational work the team accepts for another engine."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Exposure(enum.Enum):
    """Who can reach the deployment."""

    INTERNAL = "internal"
    INTERNET = "internet"
    MULTI_TENANT = "multi-tenant"
    AIRGAPPED = "airgapped"


SLO_METRICS = ("ttft", "tpot", "itl", "e2e")
_SLO_ITEM = re.compile(r"^(ttft|tpot|itl|e2e)_p(\d{1,2}(?:\.\d+)?)=([0-9]*\.?[0-9]+)(ms|s)$")


@dataclass(frozen=True, slots=True)
class SloTarget:
    """One objective: the ``percentile`` of ``metric`` at most ``limit_s``."""

    metric: str
    percentile: float
    limit_s: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.percentile:g}"


def parse_slo(text: str) -> tuple[SloTarget, ...]:
    """``"ttft_p99=1s,tpot_p99=60ms"`` as targets. Raises :class:`UsageError` naming the
    item that does not parse."""
    targets: list[SloTarget] = []
    for item in (part.strip() for part in text.split(",")):
        m = _SLO_ITEM.match(item)
        if not m:
            raise UsageError(
                f"cannot read --slo item {item!r}",
                hint="use metric_pNN=value with a unit, e.g. --slo ttft_p99=1s,tpot_p99=60ms "
                f"(metrics: {', '.join(SLO_METRICS)}; units: s, ms)",
            )
        metric, pct, value, unit = m.groups()
        percentile = float(pct)
        if not 0 < percentile < 100:
            raise UsageError(f"--slo item {item!r}: the percentile must be in (0, 100)")
        limit = float(value) / (1000.0 if unit == "ms" else 1.0)
        if limit <= 0:
            raise UsageError(f"--slo item {item!r}: the limit must be > 0")
        if any(t.metric == metric and t.percentile == percentile for t in targets):
            raise UsageError(f"--slo names {metric}_p{percentile:g} twice")
        targets.append(SloTarget(metric, percentile, limit))
    return tuple(targets)


def parse_engine_list(text: str) -> tuple[str, ...]:
    """``"vllm,sglang"`` -> engines to consider; vLLM is always kept (the default)."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        if name not in ENGINES:
            raise UsageError(f"unknown engine '{name}' (valid: {', '.join(ENGINES)})")
    if not names:
        raise UsageError("--engines is empty", hint=f"e.g. --engines {','.join(ENGINES)}")
    return tuple(n for n in ENGINES if n in names)


@dataclass(frozen=True, slots=True)
class Team:
    size: int
    ops: Ops

    def __post_init__(self) -> None:
        if self.size < 1:
            raise UsageError(f"--team-size must be at least 1, got {self.size}")


@dataclass(frozen=True, slots=True)
class AdviseOptions:
    team: Team = Team(3, Ops.MEDIUM)
    exposure: Exposure = Exposure.INTERNAL
    slo: tuple[SloTarget, ...] = ()
    engines: tuple[str, ...] = ENGINES
    min_class_requests: int = 50
    """A class with fewer requests is decided with the whole trace, not alone."""
    min_trace_requests: int = 100
    """Fewer requests and the trace is too small to decide on."""
