"""``kvroute analyze``'s reuse breakdown through the real CLI: the gateway's classes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kvroute.cli.main import build_cli


def test_breakdown_by_class_in_terminal_and_json(tmp_path: Path) -> None:
    sample, out_json = tmp_path / "s.jsonl", tmp_path / "r.json"
    runner = CliRunner()
    assert runner.invoke(build_cli(), ["sample", str(sample), "-n", "200"]).exit_code == 0
    result = runner.invoke(
        build_cli(),
        ["analyze", str(sample), "--workers", "1", "--no-breakers", "--json", str(out_json)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert "Reuse by class" in result.stdout and "within a conversation" in result.stdout
    b = json.loads(out_json.read_text())["breakdown"]
    classes = {g["key"]: g for d in b["by"] if d["dimension"] == "class" for g in d["groups"]}
    # the sample's agent sessions carry tools; its RAG requests ask for JSON 30 % of the time
    assert {"tools", "structured", "chat"} <= set(classes)
    assert sum(g["num_requests"] for g in classes.values()) == 200
    # agent sessions reuse within their conversation; one-off questions do not
    assert classes["tools"]["within_conversation_tokens"] > 0
    assert b["within_conversation_share"] + b["across_requests_share"] <= 1
