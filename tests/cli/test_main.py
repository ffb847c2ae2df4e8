"""The ``kvroute`` group: every error becomes one line and its exit code, never a traceback.

A reader that closes kvroute's standard output early (``kvroute ... | head -1``): every
command stops at once, without a word, with the status a shell reports for ``grep`` or
``cat`` there (141), and never reports a cut output as a success."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kvroute.cli import main
from kvroute.cli.main import EXIT_STDOUT_CLOSED, build_cli
from kvroute.errors import InputError, InputErrors


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


def test_usage_errors_read_like_every_other_error() -> None:
    result = CliRunner().invoke(build_cli(), ["analyze", "--nope", "x"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: No such option '--nope'. (Did you mean one of: '--no-text', '--top'?)",
        "hint: `kvroute analyze --help` lists the options",
    ]
    result = CliRunner().invoke(build_cli(), ["nope"])
    assert result.exit_code == 2 and "`kvroute --help` lists the commands" in result.stderr


def test_a_missing_choice_option_is_one_error_line_naming_the_choices() -> None:
    result = CliRunner().invoke(build_cli(), ["predict", "t.jsonl", "-g", "h100-80gb"])
    assert result.exit_code == 2
    first, hint = result.stderr.splitlines()
    assert first.startswith("error: Missing option '--engine' / '-e'. Choose from: ")
    assert all(e in first for e in ("vllm", "sglang", "llamacpp")) and "\t" not in first
    assert hint == "hint: `kvroute predict --help` lists the options"


@click.command("boom")
@click.option("--kind", type=click.Choice(["input", "many", "bug", "interrupt"]))
def boom_cmd(kind: str) -> None:
    """A command that fails the way --kind says (registered by the tests below)."""
    if kind == "input":
        raise InputError("line 3: field 'prompt' is not a string", path="t.jsonl", hint="fix it")
    if kind == "many":
        raise InputErrors([InputError("first"), InputError("second")])
    if kind == "interrupt":
        raise KeyboardInterrupt
    raise ZeroDivisionError("division by zero")


@pytest.fixture
def boom(monkeypatch: pytest.MonkeyPatch) -> click.Group:
    monkeypatch.setitem(main.COMMANDS, "boom", (__name__, "boom_cmd", "fails on purpose"))
    monkeypatch.delenv("KVROUTE_DEBUG", raising=False)
    return build_cli()


def test_a_kvroute_error_is_its_line_its_hint_and_its_exit_code(boom: click.Group) -> None:
    result = CliRunner().invoke(boom, ["boom", "--kind", "input"])
    assert result.exit_code == InputError("x").exit_code == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "line 3" in lines[0]
    assert lines[1] == "hint: fix it"
    assert "Traceback" not in result.output


def test_a_config_checked_whole_gives_a_line_per_error(boom: click.Group) -> None:
    result = CliRunner().invoke(boom, ["boom", "--kind", "many"])
    assert result.stderr.splitlines()[:2] == ["error: first", "error: second"]


def test_a_bug_is_an_internal_error_line_with_how_to_see_the_traceback(
    boom: click.Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = CliRunner().invoke(boom, ["boom", "--kind", "bug"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "internal error: ZeroDivisionError: division by zero",
        "hint: this is a kvroute bug; rerun with KVROUTE_DEBUG=1 for the traceback and report it",
    ]
    monkeypatch.setenv("KVROUTE_DEBUG", "1")
    result = CliRunner().invoke(boom, ["boom", "--kind", "bug"])
    assert isinstance(result.exception, ZeroDivisionError)  # raised, for the traceback


def test_ctrl_c_is_interrupted_and_130(boom: click.Group) -> None:
    result = CliRunner().invoke(boom, ["boom", "--kind", "interrupt"])
    assert (result.exit_code, result.stderr) == (130, "interrupted\n")


def test_help_lists_every_registered_command_with_its_line() -> None:
    words = " ".join(CliRunner().invoke(build_cli(), ["--help"]).stdout.split())
    for name, (_, _, line) in main.COMMANDS.items():
        assert f" {name} {' '.join(line.split())}" in words, name  # wrapped lines joined
