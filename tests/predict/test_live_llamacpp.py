"""``kvroute calibrate`` then ``kvroute predict --validate`` against a real llama-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli
from kvroute.engines.state import EngineRecord

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp]
# tests/engine_fixtures.py starts llama-server with --parallel 4 and a 2048-token context.
SETTING = [
    "-e",
    "llamacpp",
    "-m",
    "smollm2-135m",
    "-g",
    "cpu-testbed",
    "--dtype",
    "q4_1",
    "--capacity-tokens",
    "2048",
    "-np",
    "4",
]


def test_calibrate_then_validate_end_to_end(llamacpp_server: EngineRecord, tmp_path: Path) -> None:
    url = llamacpp_server.base_url
    cal = tmp_path / "cal.json"
    runner = CliRunner()
    r = runner.invoke(
        build_cli(),
        [
            "calibrate",
            *SETTING,
            "--url",
            url,
            "--max-isl",
            "256",
            "--max-batch",
            "2",
            "--samples",
            "10",
            "--out",
            str(cal),
        ],
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(cal.read_text())
    assert doc["engine"] == "llamacpp" and doc["source"] == "calibrate"
    assert doc["num_points"] >= 8 and len(doc["samples"]) == 10
    out = tmp_path / "p.json"
    r = runner.invoke(
        build_cli(),
        [
            "predict",
            "--workload",
            "fixed:isl=200,osl=24,n=12",
            "--concurrency",
            "2",
            *SETTING,
            "--calibration",
            str(cal),
            "--samples",
            "5",
            "--validate",
            url,
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.stderr
    pred = json.loads(out.read_text())
    assert pred["calibration"]["source"] == "calibrate"
    checks = {c["metric"]: c for c in pred["validation"]["checks"]}
    assert set(checks) == {"ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "e2e_p50", "e2e_p99"}
    for c in checks.values():
        assert c["measured_s"] > 0 and c["predicted_s"] > 0
    # A calibrated prediction on the machine it was calibrated on lands near the
    # measurement (the testbed is shared and noisy: a factor, not a percentage).
    assert 0.5 < checks["tpot_p50"]["predicted_s"] / checks["tpot_p50"]["measured_s"] < 2.0
    assert 0.33 < checks["e2e_p50"]["predicted_s"] / checks["e2e_p50"]["measured_s"] < 3.0
