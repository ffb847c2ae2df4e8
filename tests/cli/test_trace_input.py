"""``kvroute analyze -`` and ``kvroute simulate -``: the trace read from standard input,
its format detected as for a file, gzip included, and named ``<stdin>``."""

from __future__ import annotations

import gzip
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def mooncake_lines(n: int = 40) -> list[str]:
    return [
        json.dumps(
            {"timestamp": i * 100, "input_length": 1500, "output_length": 8, "hash_ids": [1, 2, i]}
        )
        for i in range(n)
    ]


def without_path(doc: object) -> object:
    """A result without what differs between two reads of one trace: its name, the
    times taken."""
    if isinstance(doc, list):
        return [without_path(v) for v in doc]
    if isinstance(doc, dict):
        return {k: without_path(v) for k, v in doc.items() if k not in ("elapsed_s", "path")}
    return doc


def test_analyze_dash_reads_stdin_like_the_file(tmp_path: Path) -> None:
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("\n".join(mooncake_lines()) + "\n")
    code, from_file, err = run("analyze", str(trace), "--json", "-", "-q")
    assert code == 0, err
    code, from_stdin, err = run("analyze", "-", "--json", "-", "-q", stdin=trace.read_bytes())
    assert code == 0, err
    doc = json.loads(from_stdin)
    assert doc["trace"]["path"] == "<stdin>" and doc["trace"]["format"] == "mooncake"
    assert doc["trace"]["num_requests"] == 40
    assert without_path(doc) == without_path(json.loads(from_file))


def test_analyze_dash_detects_a_chat_log_on_stdin(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    assert run("sample", str(log), "-n", "20")[0] == 0
    code, out, err = run(
        "analyze", "-", "--json", "-", "-q", "--workers", "1", stdin=log.read_bytes()
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["trace"]["format"] == "openai" and doc["trace"]["num_requests"] == 20
    assert doc["trace"]["prompt_form"] == "tokens"


def test_simulate_dash_reads_gzip_from_a_real_pipe(tmp_path: Path) -> None:
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("\n".join(mooncake_lines()) + "\n")
    args = ["--capacity-tokens", "4k", "--json", "-", "-q"]
    code, from_file, err = run("simulate", str(trace), *args)
    assert code == 0, err
    proc = subprocess.run(
        [sys.executable, "-m", "kvroute", "simulate", "-", *args],
        input=gzip.compress(trace.read_bytes()),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["trace"]["path"] == "<stdin>"
    assert without_path(doc) == without_path(json.loads(from_file))


@pytest.mark.parametrize("command", ["analyze", "simulate"])
def test_a_bad_line_on_stdin_is_named_stdin(command: str) -> None:
    lines = mooncake_lines(6)
    lines.insert(3, "{not json")
    code, _, err = run(command, "-", stdin=("\n".join(lines) + "\n").encode())
    assert code == 3, err
    first = err.splitlines()[0]
    assert first.startswith("error: <stdin>:4: invalid JSON"), err
    assert "kvroute-stdin" not in err and "Traceback" not in err


def test_empty_stdin_is_an_empty_trace() -> None:
    code, _, err = run("analyze", "-", stdin=b"")
    assert code == 3 and err.startswith("error: <stdin>: the file is empty"), err


def test_dash_with_a_terminal_on_stdin_is_refused_not_waited_on() -> None:
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kvroute", "analyze", "-"],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(secondary)
        os.close(primary)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: TRACE is '-' (standard input), but nothing is piped in")
