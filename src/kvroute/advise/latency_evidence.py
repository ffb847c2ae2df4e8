"""Evidence from ``kvroute predict``: the share of requests that meet every SLO. Pure.

Each call predicts the engine serving the class's requests at their own arrival times
(sequentially when the trace has none) on the user's GPU, model and tensor-parallel
width, with the engine's calibration when one was given and predict's shipped fits or
widened priors otherwise. A request scores 1 when its predicted TTFT, TPOT (``itl`` is
read as TPOT: the mean gap between tokens) and E2E are all within every ``--slo``
limit, else 0 (a rejected request scores 0); the weight is 1. The percentile of a
target (``ttft_p99``) does not change the per-request test: it says which attainment
the class needs (99 %), and :func:`target_citations` checks that.

Where predict cannot run, :func:`latency_unusable` says why, and the caller scores
hits instead (:mod:`kvroute.advise.hit_evidence`) and records the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvroute.advise.base import EngineFigures, FloatArray
from kvroute.advise.flags import llamacpp_slots
from kvroute.advise.hardware import CPU, Hardware
from kvroute.advise.options import SloTarget
from kvroute.advise.result import Citation, EngineScore, LatencySummary
from kvroute.advise.workload import concurrency_p90
from kvroute.cache.capacity import GpuSpec, resolve_gpu
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.registry import EngineSettings
from kvroute.cache.replay.timing import TimingOptions
from kvroute.errors import UsageError
from kvroute.predict.calibration import Calibration
from kvroute.predict.engine import EngineFlags
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.predict import Load, predict
from kvroute.predict.result import Estimate, PerRequest
from kvroute.trace.records import Request

METRIC = "slo_attainment"
DEFAULT_SAMPLES = 5
"""Coefficient draws per prediction: the score reads the point prediction per request,
the draws only widen the reported percentiles, so a few keep advise quick."""


CPU_TESTBED = "cpu-testbed"
"""The speed preset of ``--gpu cpu`` (what ``kvroute calibrate`` fits on by default)."""


def predict_gpu(hardware: Hardware) -> GpuSpec:
    """The GPU preset predict reads speeds from; ``UsageError`` for an unknown one."""
    return resolve_gpu(CPU_TESTBED if hardware.gpu == CPU else hardware.gpu)


def latency_unusable(requests: Sequence[Request], hardware: Hardware) -> str | None:
    """Why predict cannot score these requests on this hardware; ``None`` when it can."""
    try:
        hardware_for(predict_gpu(hardware), num_gpus=hardware.num_gpus)
        model_cost(hardware.model)
    except UsageError as exc:
        return str(exc)
    if not any(getattr(r.prompt, "num_tokens", 0) for r in requests):
        return "the trace's prompts carry no token counts, which predict needs"
    return None


def _per_request_met(per: PerRequest, slo: Sequence[SloTarget]) -> dict[str, FloatArray]:
    values = {"ttft": per.ttft_s, "tpot": per.tpot_s, "itl": per.tpot_s, "e2e": per.e2e_s}
    out = {}
    for target in slo:
        v = values[target.metric]
        # NaN TPOT (a one-token output) has no gap to miss; a rejected request misses all.
        met = np.where(np.isnan(v), True, v <= target.limit_s) & per.admitted
        out[target.name] = met.astype(np.float64)
    return out


def advised_flags(requests: Sequence[Request]) -> EngineFlags:
    """The engines as advise launches them where that changes scheduling: llama.cpp with
    ``-np`` from the class's p90 concurrency (flags.py) and no ``--kv-unified`` (so each
    slot has its own share of the context, as ``-c`` = slots x the longest sequence
    intends); vLLM and SGLang at their defaults."""
    slots = llamacpp_slots(concurrency_p90(requests, TimingOptions()))
    llama = LlamaCppConfig(num_slots=slots, kv_unified=False)
    return EngineFlags(cache=EngineSettings(llamacpp=llama))


def _value(e: Estimate) -> float | None:
    return e.value if math.isfinite(e.value) else None


@dataclass(frozen=True, slots=True)
class PredictEvidence:
    """:class:`~kvroute.advise.base.LatencyEvidence` from predicted latencies."""

    slo: tuple[SloTarget, ...]
    calibrations: Mapping[str, Calibration] = field(default_factory=dict)
    """Engine -> its calibration (``--calibration``); others use predict's priors."""
    num_samples: int = DEFAULT_SAMPLES
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.slo:
            raise UsageError(
                "latency evidence needs --slo (what the latencies are scored against)",
                hint="e.g. --slo ttft_p99=1s,tpot_p99=60ms, or --evidence hits",
            )

    @property
    def metric(self) -> str:
        return METRIC

    def figures(
        self,
        requests: Sequence[Request],
        engine: str,
        hardware: Hardware,
        *,
        capacity_tokens: int | None = None,
    ) -> EngineFigures:
        pool = hardware.pool_tokens if capacity_tokens is None else capacity_tokens
        if not requests:
            empty = np.zeros(0, dtype=np.float64)
            return EngineFigures(engine, METRIC, empty, empty, pool)
        p = predict(
            requests,
            engine=engine,
            gpu=predict_gpu(hardware),
            model=hardware.model,
            load=Load(),
            num_gpus=hardware.num_gpus,
            engine_flags=advised_flags(requests),
            calibration=self.calibrations.get(engine),
            capacity_tokens=pool,
            num_samples=self.num_samples,
            seed=self.seed,
        )
        met = _per_request_met(p.requests, self.slo)
        every = np.logical_and.reduce([m > 0 for m in met.values()]).astype(np.float64)
        summary = LatencySummary(
            ttft_p50_s=_value(p.ttft.p50),
            ttft_p99_s=_value(p.ttft.p99),
            tpot_p50_s=_value(p.tpot.p50),
            tpot_p99_s=_value(p.tpot.p99),
            attainment={name: float(m.mean()) for name, m in met.items()},
            saturated=p.saturation.saturated,
            verdict=p.saturation.verdict,
            load=p.load,
            calibration_source=p.calibration_source,
            uses_prior=p.uses_prior,
        )
        return EngineFigures(
            engine=engine,
            metric=METRIC,
            benefit=every,
            weight=np.ones(len(requests), dtype=np.float64),
            capacity_tokens=pool,
            details={
                "num_rejected": float(p.num_rejected),
                "hit_ratio": p.hit_ratio,
                "sustainable_rate_per_s": p.saturation.sustainable_rate_per_s,
            },
            latency=summary,
        )


def _limit(t: SloTarget) -> str:
    return f"{t.limit_s * 1000:g} ms" if t.limit_s < 1 else f"{t.limit_s:g} s"


def _misses(lat: LatencySummary, slo: Sequence[SloTarget]) -> list[str]:
    return [
        f"{t.name} {lat.attainment.get(t.name, 0.0):.0%} within {_limit(t)}"
        for t in slo
        if lat.attainment.get(t.name, 0.0) * 100 < t.percentile
    ]


def slo_headline(
    scores: Sequence[EngineScore], chosen: str, slo: Sequence[SloTarget], names: Mapping[str, str]
) -> str:
    """The engines that miss a target, for the class's headline ("" when none does or
    the scores are not latency); says so first when the chosen engine misses too."""
    missing = []
    chosen_misses: list[str] = []
    for s in scores:
        if s.latency is None:
            continue
        misses = _misses(s.latency, slo)
        if s.engine == chosen:
            chosen_misses = misses
        elif misses:
            sat = ", saturated" if s.latency.saturated else ""
            missing.append(f"{names[s.engine]} ({'; '.join(misses)}{sat})")
    text = f"; misses the SLO: {', '.join(missing)}" if missing else ""
    if chosen_misses:
        text += (
            f"; {names[chosen]} misses it too ({'; '.join(chosen_misses)}): no engine meets "
            "the SLO at this load on this hardware, add replicas or a larger GPU"
        )
    return text


def target_citations(
    scores: Sequence[EngineScore], slo: Sequence[SloTarget], where: str
) -> list[Citation]:
    """Per engine and target: does the predicted share within the limit reach the
    target's percentile (``ttft_p99=1s``: 99 % of requests within 1 s)?"""
    out = []
    for s in scores:
        if s.latency is None:
            continue
        lat = s.latency
        for t in slo:
            share = lat.attainment.get(t.name, 0.0)
            meets = share * 100 >= t.percentile
            state = "saturated" if lat.saturated else "keeps up"
            out.append(
                Citation(
                    "slo_target",
                    f"{where}.scores[{s.engine}].latency.attainment[{t.name}]",
                    f"{share:.1%} within {_limit(t)}",
                    f">= {t.percentile:g} % of requests ({t.name})",
                    f"{'meets' if meets else 'misses'} ({state})",
                )
            )
    return out
