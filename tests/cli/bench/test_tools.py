"""``kvroute bench compare | workloads | generate | report`` on bad input: one line, the
file or option named, the right exit code, nothing written."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner, Result

from kvroute.bench.result import result_bytes
from kvroute.cli.main import build_cli
from report.bench.results import result  # the hand-built results of tests/report/bench


def run(*args: str) -> Result:
    return CliRunner().invoke(build_cli(), list(args))


def error_lines(out: Result) -> list[str]:
    assert "Traceback" not in out.output
    return [line for line in out.stderr.splitlines() if line]


def test_report_of_a_file_that_is_not_a_bench_result_names_the_file(tmp_path: Path) -> None:
    other = tmp_path / "analysis.json"
    other.write_text(json.dumps({"schema": "kvroute.analyze/1"}))
    out = run("bench", "report", str(other))
    assert out.exit_code == 3
    (line,) = error_lines(out)
    assert line.startswith("error: ") and str(other) in line and "'kvroute.analyze/1'" in line
    garbage = tmp_path / "cut.json"
    garbage.write_text('{"schema": ')
    out = run("bench", "report", str(garbage))
    assert out.exit_code == 3 and "cannot read a bench result" in out.stderr


def test_report_shows_a_saved_result_again(tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    saved.write_bytes(result_bytes(result(0.2)))
    out = run("bench", "report", str(saved), "--html", str(tmp_path / "r.html"))
    assert out.exit_code == 0, out.output
    assert "llama" in out.stdout and "rate=4/s" in out.stdout
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_compare_refuses_two_different_experiments_and_says_how_to_force(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(result_bytes(result(0.2)))
    other = result(0.2)
    b.write_bytes(result_bytes(replace(other, workload=replace(other.workload, seed=7))))
    out = run("bench", "compare", str(a), str(b), "--html", str(tmp_path / "c.html"))
    assert out.exit_code == 2
    first, hint = error_lines(out)
    assert "are different experiments" in first and "seed" in first
    assert hint.startswith("hint: ") and "--force" in hint
    assert not (tmp_path / "c.html").exists()


def test_a_missing_result_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    out = run("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert out.exit_code == 2
    assert "a.json" in error_lines(out)[0] and "does not exist" in error_lines(out)[0]


def test_an_unknown_workload_lists_the_valid_ones() -> None:
    out = run("bench", "workloads", "nope")
    assert out.exit_code == 2
    assert "'nope'" in out.stderr and "rag" in out.stderr


def test_workloads_prints_each_ones_summary_without_rest_markup() -> None:
    out = run("bench", "workloads")
    assert out.exit_code == 0
    lines = [line for line in out.stdout.splitlines() if line and not line.startswith(" ")]
    assert len(lines) >= 4 and all("``" not in line for line in lines)
    assert any(line.startswith("rag  ") for line in lines)


def test_generate_into_a_missing_directory_is_refused_before_any_work(tmp_path: Path) -> None:
    out = run("bench", "generate", "rag", str(tmp_path / "no" / "such" / "log.jsonl"), "-n", "5")
    assert out.exit_code == 2 and "directory" in out.stderr
    assert list(tmp_path.iterdir()) == []
