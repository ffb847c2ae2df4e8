"""``scripts/demo`` end to end: sample trace -> analyze -> advise -> report and config."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from kvroute.engines.paths import default_model_path

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_demo_writes_the_report_and_a_config_serve_accepts(tmp_path: Path) -> None:
    assert default_model_path().is_file(), "run `scripts/install-engines model` first"
    out = tmp_path / "demo"
    env = {**os.environ, "KVROUTE_DEMO_OUT": str(out)}
    done = subprocess.run(
        [str(ROOT / "scripts" / "demo")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"ok: \d+ backends?, ", done.stdout), done.stdout[-2000:]
    advice = json.loads((out / "advice" / "advice.json").read_text())
    assert advice["schema"] == "kvroute.advise/1" and advice["classes"]
    assert advice["headline"] in done.stdout
    html = (out / "advice" / "report.html").read_text()
    assert "kvroute advise" in html and "<svg" in html
    assert (out / "analyze.html").is_file()
    for name in ("gateway.yaml", "alerts.yaml", "launch-vllm.sh"):
        assert (out / "advice" / name).is_file()
