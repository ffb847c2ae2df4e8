"""``kvroute analyze --warmup`` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kvroute.cli.main import build_cli


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_warmup_share_in_terminal_and_json(tmp_path: Path) -> None:
    sample, out_json = tmp_path / "s.jsonl", tmp_path / "r.json"
    assert run("sample", str(sample), "-n", "200")[0] == 0
    code, out, err = run(
        "analyze",
        str(sample),
        "--workers",
        "1",
        "--no-breakers",
        "--warmup",
        "50%",
        "--json",
        str(out_json),
    )
    assert code == 0, err
    assert "from an empty cache" in out and "warm-up left out" in out
    ov = json.loads(out_json.read_text())["overlap"]
    assert ov["warmup"] == "first 50 % of requests" and ov["num_warmup_requests"] == 100
    # the sample's sessions and RAG documents repeat: a warm cache reuses more
    assert ov["hit_ratio"] > ov["cold_hit_ratio"] > 0


def test_bad_warmup_is_a_usage_error(tmp_path: Path) -> None:
    sample = tmp_path / "s.jsonl"
    assert run("sample", str(sample), "-n", "20")[0] == 0
    code, _, err = run("analyze", str(sample), "--warmup", "soon")
    assert code == 2 and "--warmup 'soon'" in err and "Traceback" not in err
    code, _, err = run("analyze", str(sample), "--workers", "1", "--warmup", "1h", "-q")
    assert code == 2 and "nothing is left" in err
