"""Fitted step-time coefficients for one engine on one kind of hardware, as JSON.

A calibration comes from ``kvroute calibrate`` (a microbenchmark on a live engine), from
the public GPU runs (``bench/predict_gpu_runs.py``), or is a shipped *prior* (``priors.json``
next to this module: the GPU-run fits). It holds the point fit, bootstrap draws of it (the
fit's uncertainty), the log-residual spread of the fit (what the basis cannot explain)
and, where the calibration served its probes more than once, their repeat-to-repeat
spread (the machine's own drift between identical runs); all of them become the
prediction's intervals. Schema: docs/predict.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kvroute.errors import InputError, UsageError
from kvroute.predict.steptime import FEATURES

FORMAT_VERSION = 1
PRIOR_WIDENING = 2.0
"""A prior used off its own hardware or engine: residual spreads are multiplied by this."""
PRIOR_FLOOR_SIGMA = 0.25
"""... and are at least this (log units: about +-28 % at one sigma)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    engine: str
    hardware: str
    coefficients: tuple[float, ...]
    samples: tuple[tuple[float, ...], ...] = ()
    sigma_ttft: float = 0.0
    """Standard deviation of log(measured / predicted) TTFT over the fit's points."""
    sigma_tpot: float = 0.0
    repeat_sigma_ttft: float = 0.0
    """Pooled standard deviation of log TTFT p50 between repeats of the same probe."""
    repeat_sigma_tpot: float = 0.0
    source: str = "calibrate"
    engine_version: str | None = None
    engine_flags: tuple[str, ...] = ()
    machine: str | None = None
    model: str | None = None
    num_points: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "kvroute_calibration": FORMAT_VERSION,
            "engine": self.engine,
            "hardware": self.hardware,
            "model": self.model,
            "source": self.source,
            "engine_version": self.engine_version,
            "engine_flags": list(self.engine_flags),
            "machine": self.machine,
            "features": list(FEATURES),
            "coefficients": list(self.coefficients),
            "samples": [list(s) for s in self.samples],
            "residual_sigma": {"ttft": self.sigma_ttft, "tpot": self.sigma_tpot},
            "repeat_sigma": {"ttft": self.repeat_sigma_ttft, "tpot": self.repeat_sigma_tpot},
            "num_points": self.num_points,
            "notes": list(self.notes),
        }

    def interval_sigma(self) -> tuple[float, float]:
        """Log-normal spread of (TTFT, TPOT) for the intervals: the fit's residual and
        the repeat-to-repeat drift, independent, so their variances add."""
        return (
            math.hypot(self.sigma_ttft, self.repeat_sigma_ttft),
            math.hypot(self.sigma_tpot, self.repeat_sigma_tpot),
        )

    def as_prior(self, engine: str, hardware: str, why: str) -> Calibration:
        """This calibration standing in for ``engine`` on ``hardware``, with wider spreads."""
        return Calibration(
            engine=engine,
            hardware=hardware,
            coefficients=self.coefficients,
            samples=self.samples,
            sigma_ttft=max(self.sigma_ttft * PRIOR_WIDENING, PRIOR_FLOOR_SIGMA),
            sigma_tpot=max(self.sigma_tpot * PRIOR_WIDENING, PRIOR_FLOOR_SIGMA),
            repeat_sigma_ttft=self.repeat_sigma_ttft,
            repeat_sigma_tpot=self.repeat_sigma_tpot,
            source="prior",
            engine_version=self.engine_version,
            engine_flags=self.engine_flags,
            machine=self.machine,
            model=self.model,
            num_points=self.num_points,
            notes=(*self.notes, why),
        )


def _vector(value: Any, where: str, path: str) -> tuple[float, ...]:
    if (
        not isinstance(value, list)
        or len(value) != len(FEATURES)
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise InputError(f"expected a list of {len(FEATURES)} numbers", path=path, field=where)
    out = tuple(float(v) for v in value)
    if any(not math.isfinite(v) or v < 0 for v in out):
        raise InputError("coefficients must be finite and non-negative", path=path, field=where)
    return out


def _sigmas(raw: Any, where: str, path: str) -> dict[str, float]:
    """``{"ttft": s, "tpot": s}`` (each a number >= 0, 0 when absent)."""
    if not isinstance(raw, dict):
        raise InputError("expected an object", path=path, field=where)
    out = {}
    for key in ("ttft", "tpot"):
        v = raw.get(key, 0.0)
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < math.inf:
            raise InputError("expected a number >= 0", path=path, field=f"{where}.{key}")
        out[key] = float(v)
    return out


def repeat_spread(repeats: Sequence[Sequence[float]]) -> float:
    """Pooled standard deviation of log values between repeats of the same probe:
    ``repeats[i]`` holds probe ``i``'s measurement once per repeat (non-positive or
    non-finite ones are left out). 0 when no probe has two usable repeats."""
    num = 0.0
    dof = 0
    for values in repeats:
        logs = [math.log(v) for v in values if math.isfinite(v) and v > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        num += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return math.sqrt(num / dof) if dof else 0.0


def calibration_from_json(raw: Any, *, path: str = "<calibration>") -> Calibration:
    """Validate and read a calibration document; ``InputError`` names the field."""
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object", path=path)
    if raw.get("kvroute_calibration") != FORMAT_VERSION:
        raise InputError(
            f"not a kvroute calibration (version {FORMAT_VERSION})",
            path=path,
            field="kvroute_calibration",
        )
    if raw.get("features") != list(FEATURES):
        raise InputError(f"expected features {list(FEATURES)}", path=path, field="features")
    for key in ("engine", "hardware"):
        if not isinstance(raw.get(key), str):
            raise InputError("expected a string", path=path, field=key)
    samples = raw.get("samples", [])
    if not isinstance(samples, list):
        raise InputError("expected a list", path=path, field="samples")
    sigma = raw.get("residual_sigma", {})
    sig = _sigmas(sigma, "residual_sigma", path)
    repeat = _sigmas(raw.get("repeat_sigma", {}), "repeat_sigma", path)
    flags = raw.get("engine_flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise InputError("expected a list of strings", path=path, field="engine_flags")
    return Calibration(
        engine=raw["engine"],
        hardware=raw["hardware"],
        coefficients=_vector(raw.get("coefficients"), "coefficients", path),
        samples=tuple(_vector(s, f"samples[{i}]", path) for i, s in enumerate(samples)),
        sigma_ttft=sig["ttft"],
        sigma_tpot=sig["tpot"],
        repeat_sigma_ttft=repeat["ttft"],
        repeat_sigma_tpot=repeat["tpot"],
        source=str(raw.get("source", "calibrate")),
        engine_version=raw.get("engine_version"),
        engine_flags=tuple(flags),
        machine=raw.get("machine"),
        model=raw.get("model"),
        num_points=int(raw.get("num_points", 0)),
        notes=tuple(str(n) for n in raw.get("notes", [])),
    )


def load_calibration(path: Path) -> Calibration:
    """Read a calibration file; ``InputError`` when unreadable or invalid."""
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read calibration: {exc}", path=str(path)) from None
    return calibration_from_json(raw, path=str(path))


def shipped_priors() -> list[Calibration]:
    """The calibrations shipped with kvroute (``priors.json``)."""
    text = resources.files("kvroute.predict").joinpath("priors.json").read_text("utf-8")
    raw = json.loads(text)
    return [calibration_from_json(c, path="priors.json") for c in raw["calibrations"]]


def choose_calibration(
    engine: str, hardware: str, given: Calibration | None, priors: list[Calibration]
) -> Calibration:
    """``given`` when it is for ``engine`` (``UsageError`` otherwise); else the shipped fit
    for this engine and hardware; else the nearest prior, widened and saying so."""
    if given is not None:
        if given.engine != engine:
            raise UsageError(
                f"the calibration is for engine '{given.engine}', not '{engine}'",
                hint=f"run kvroute calibrate --engine {engine}, or drop --calibration",
            )
        return given
    same_engine = [c for c in priors if c.engine == engine]
    for c in same_engine:
        if c.hardware == hardware:
            return c
    if same_engine:
        c = same_engine[0]
        why = f"no {engine} calibration for {hardware}: using the {c.hardware} fit as a prior"
        return c.as_prior(engine, hardware, why)
    if not priors:
        raise UsageError(f"no calibration for {engine} and no shipped prior")
    c = next((p for p in priors if p.hardware == hardware), priors[0])
    why = (
        f"no {engine} calibration anywhere: using the {c.engine} fit on {c.hardware} as a "
        f"prior; run kvroute calibrate --engine {engine} for a real one"
    )
    return c.as_prior(engine, hardware, why)
