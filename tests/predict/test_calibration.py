"""Calibration documents: the repeat-to-repeat spread they carry, and what it does to
the prediction's intervals."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli
from kvroute.errors import InputError
from kvroute.predict.calibration import (
    Calibration,
    calibration_from_json,
    repeat_spread,
    shipped_priors,
)


def _vllm_prior() -> Calibration:
    return next(c for c in shipped_priors() if c.engine == "vllm" and c.hardware == "h100-80gb")


def test_repeat_spread_is_the_pooled_log_sd_between_repeats() -> None:
    # probe A: 100 and 200 ms (log sd of a pair: |ln 2| / sqrt 2); probe B the same
    # ratio; probe C measured once adds nothing
    s = repeat_spread([[0.1, 0.2], [2.0, 4.0], [0.5]])
    assert math.isclose(s, math.log(2) / math.sqrt(2))
    assert repeat_spread([[0.1], [0.3]]) == 0.0  # one repeat each: nothing measured
    assert repeat_spread([[0.1, 0.1, 0.1]]) == 0.0
    assert repeat_spread([[0.1, math.nan, 0.2]]) == repeat_spread([[0.1, 0.2]])


def test_the_repeat_spread_round_trips_and_older_documents_read_as_zero() -> None:
    cal = dataclasses.replace(_vllm_prior(), repeat_sigma_ttft=0.3, repeat_sigma_tpot=0.2)
    doc = cal.to_json()
    assert doc["repeat_sigma"] == {"ttft": 0.3, "tpot": 0.2}
    back = calibration_from_json(json.loads(json.dumps(doc)))
    assert (back.repeat_sigma_ttft, back.repeat_sigma_tpot) == (0.3, 0.2)
    del doc["repeat_sigma"]
    old = calibration_from_json(doc)
    assert (old.repeat_sigma_ttft, old.repeat_sigma_tpot) == (0.0, 0.0)
    doc["repeat_sigma"] = {"ttft": -1}
    with pytest.raises(InputError, match=r"repeat_sigma\.ttft"):
        calibration_from_json(doc)


def test_interval_sigma_adds_the_variances() -> None:
    cal = dataclasses.replace(
        _vllm_prior(), sigma_ttft=0.3, sigma_tpot=0.1, repeat_sigma_ttft=0.4, repeat_sigma_tpot=0
    )
    ttft, tpot = cal.interval_sigma()
    assert math.isclose(ttft, 0.5)
    assert math.isclose(tpot, 0.1)


def _predicted_tpot(tmp_path: Path, cal: Calibration, name: str) -> dict[str, object]:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cal.to_json()))
    out = tmp_path / f"{name}-p.json"
    r = CliRunner().invoke(
        build_cli(),
        [
            "predict",
            "--workload",
            "fixed:isl=500,osl=40,n=24",
            "--concurrency",
            "4",
            "-e",
            "vllm",
            "-m",
            "llama-3.1-8b",
            "-g",
            "h100-80gb",
            "--samples",
            "40",
            "--calibration",
            str(path),
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.stderr
    tpot: dict[str, object] = json.loads(out.read_text())["summary_s"]["tpot"]["p50"]
    return tpot


def test_a_measured_drift_widens_the_intervals_around_the_same_point(tmp_path: Path) -> None:
    # A calibration whose fit is tight (residual log sd 0.02, no coefficient spread) on a
    # machine whose identical runs differ by about 1.5x (repeat log sd 0.4): a TPOT 50 %
    # above the point must fall inside the 95 % interval; without the drift it does not.
    prior = _vllm_prior()
    base = dataclasses.replace(
        prior, samples=(prior.coefficients,) * 40, sigma_ttft=0.02, sigma_tpot=0.02
    )
    steady = _predicted_tpot(tmp_path, base, "steady")
    drifting = _predicted_tpot(
        tmp_path, dataclasses.replace(base, repeat_sigma_tpot=0.4), "drifting"
    )
    assert steady["value"] == drifting["value"]
    lo_s, hi_s = steady["ci95"]  # type: ignore[misc]
    lo_d, hi_d = drifting["ci95"]  # type: ignore[misc]
    value = float(steady["value"])  # type: ignore[arg-type]
    assert hi_d > hi_s and lo_d < lo_s
    assert hi_s < 1.5 * value <= hi_d
