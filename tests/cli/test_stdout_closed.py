"""A reader that closes kvroute's standard output early (``kvroute ... | head -1``):
every command stops at once, without a word, with the status a shell reports for
``grep`` or ``cat`` there (141), and never reports a cut output as a success."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvroute.cli.main import EXIT_STDOUT_CLOSED


def kvroute(*args: str) -> list[str]:
    return [sys.executable, "-m", "kvroute", *args]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "mooncake.jsonl"
    lines = [
        json.dumps(
            {"timestamp": i * 100, "input_length": 1500, "output_length": 8, "hash_ids": [1, 2, i]}
        )
        for i in range(40)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("out", ["-", "/dev/stdout"])
def test_reader_that_stops_after_one_line(tmp_path: Path, out: str) -> None:
    """Several MiB of JSONL into a pipe whose reader takes one line and leaves."""
    proc = subprocess.Popen(
        kvroute("sample", out, "-n", "3000"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_STDOUT_CLOSED == 141, err
    assert "messages" in json.loads(first)["request"]
    assert err == b""


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{trace}"],  # the terminal summary, through rich
        ["analyze", "{trace}", "--json", "-"],
        ["simulate", "{trace}", "--capacity-tokens", "4k"],
        ["simulate", "{trace}", "--html", "-"],
    ],
)
def test_stdout_already_closed(trace: Path, args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            kvroute(*(a.format(trace=trace) for a in args)),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    if "-" in args:  # the summary went to stderr, and nothing else did
        assert b"mooncake.jsonl" in proc.stderr and b"rror" not in proc.stderr, proc.stderr
    else:
        assert proc.stderr == b""
