"""``kvroute simulate --latency``: predict's latency per engine next to the hit table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(build_cli(), list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "sample.jsonl"
    assert _run("sample", str(path), "-n", "80")[0] == 0
    return path


def test_latency_table_and_json_match_predict(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    code, stdout, stderr = _run(
        "simulate", str(sample), "--engines", "vllm,sglang", "--no-ideal", "--latency",
        "--json", str(out), "--workers", "1",
    )  # fmt: skip
    assert code == 0, stderr
    assert "predicted latency (ms)" in stdout and "TTFT p50" in stdout
    doc = json.loads(out.read_text())
    lat = {d["engine"]: d for d in doc["latency"]}
    assert set(lat) == {"vllm", "sglang"}
    for engine, d in lat.items():
        assert d["kvroute_prediction"] == 1 and "requests" not in d
        ttft = d["summary_s"]["ttft"]
        assert 0 < ttft["p50"]["value"] <= ttft["p99"]["value"]
        assert d["saturation"]["verdict"] and d["saturation"]["verdict"] in stdout
        # The hit ratio predict replays is the one simulate's cache model reports.
        sim_hit = next(e for e in doc["engines"] if e["engine"] == engine)["hit_ratio"]
        assert d["hit_ratio"] == pytest.approx(sim_hit, abs=0.02)


def test_latency_refuses_validate(sample: Path) -> None:
    code, _, stderr = _run(
        "simulate", str(sample), "--latency", "--validate", "http://127.0.0.1:9", "--engine",
        "vllm",
    )  # fmt: skip
    assert code == 2
    assert "--latency" in stderr and "Traceback" not in stderr
