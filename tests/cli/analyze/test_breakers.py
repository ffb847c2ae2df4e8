"""``kvroute analyze``'s cache breakers through the real CLI: terminal, JSON, HTML,
``--no-text``, ``--no-breakers`` and ``--fail-under``'s exit code."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from kvroute.cli.analyze.command import EXIT_BELOW_THRESHOLD
from kvroute.cli.main import build_cli
from kvroute.trace.planted import planted_logs


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("breakers") / "timestamps.jsonl"
    records = planted_logs("timestamp", 100, seed=4).broken
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def test_breaker_in_terminal_json_and_html(tmp_path: Path, broken: Path) -> None:
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code, out, err = run(
        "analyze", str(broken), "--workers", "1", "--json", str(out_json), "--html", str(out_html)
    )
    assert code == 0, err
    assert "Cache breakers" in out and "timestamp" in out and "fix:" in out
    b = json.loads(out_json.read_text())["breakers"]
    (f,) = b["findings"]
    assert f["kind"] == "timestamp" and f["field"] == "messages[0].content (system)"
    assert f["ideal_hit_after"] > f["ideal_hit_before"] + 0.1
    assert {e["engine"] for e in f["engines"]} == {"llamacpp", "vllm", "sglang"}
    assert all(e["hit_after"] > e["hit_before"] for e in f["engines"])
    assert b["capacity_tokens"] == 256 * 1024
    assert "Current time: 2025-" in f["examples"][0]
    html = out_html.read_text()
    assert "Cache breakers" in html and "Current time" in html


def test_no_text_and_no_breakers(tmp_path: Path, broken: Path) -> None:
    out_json = tmp_path / "r.json"
    code, out, _ = run(
        "analyze",
        str(broken),
        "--workers",
        "1",
        "--no-text",
        "--capacity-tokens",
        "none",
        "--json",
        str(out_json),
    )
    assert code == 0
    (f,) = json.loads(out_json.read_text())["breakers"]["findings"]
    assert f["examples"] is None and f["context_before"] is None and f["engines"] == []
    assert "2025-" not in out
    code, _, _ = run(
        "analyze", str(broken), "--workers", "1", "--no-breakers", "--json", str(out_json)
    )
    assert code == 0 and json.loads(out_json.read_text())["breakers"] is None


def test_fail_under_has_its_own_exit_code(tmp_path: Path, broken: Path) -> None:
    out_json = tmp_path / "r.json"
    args = ("analyze", str(broken), "--workers", "1", "-q", "--capacity-tokens", "none")
    code, _, err = run(*args, "--json", str(out_json), "--fail-under", "90")
    assert code == EXIT_BELOW_THRESHOLD == 6
    assert err.strip().startswith("fail-under: prefix overlap") and "1 cache breaker" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert out_json.is_file()  # the report is written before the verdict
    assert run(*args, "--fail-under", "10")[0] == 0


def test_healthy_sample_has_no_breaker(tmp_path: Path) -> None:
    sample, out_json = tmp_path / "s.jsonl", tmp_path / "r.json"
    assert run("sample", str(sample), "-n", "300")[0] == 0
    code, out, _ = run("analyze", str(sample), "--workers", "1", "--json", str(out_json))
    assert code == 0 and "No cache breaker found" in out
    assert json.loads(out_json.read_text())["breakers"]["findings"] == []


def test_bad_capacity_is_a_usage_error(broken: Path) -> None:
    code, _, err = run("analyze", str(broken), "--capacity-tokens", "lots")
    assert code == 2 and "capacity" in err and "Traceback" not in err
