"""Where commands write their output files: links, FIFOs and devices stay what they are,
and a bad output path is refused before any work, in one line, with the option named."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli
from kvroute.engines.state import EngineRecord


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def expected_sample(tmp_path: Path, n: int = 20) -> bytes:
    plain = tmp_path / "plain.jsonl"
    assert run("sample", str(plain), "-n", str(n))[0] == 0
    return plain.read_bytes()


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every command's first step of real work fail loudly (as an internal error)."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started its work")

    for target in (
        "kvroute.cli.analyze.command.read_trace",
        "kvroute.cli.simulate.command.load_trace",
        "kvroute.trace.synthetic.sample_log",
        "kvroute.trace.tokenizer.load_tokenizer",
        "kvroute.bench.runner.run_bench",
    ):
        monkeypatch.setattr(target, started)


def assert_one_line_usage_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert "Traceback" not in err and "internal error" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_symlink_stays_a_link_and_its_target_gets_the_output(tmp_path: Path) -> None:
    want = expected_sample(tmp_path)
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    code, _, err = run("sample", str(link), "-n", "20")
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() == want
    # a dangling link: its target is created, the link kept
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to("made.jsonl")
    assert run("sample", str(dangling), "-n", "20")[0] == 0
    assert dangling.is_symlink() and (tmp_path / "made.jsonl").read_bytes() == want


def test_fifo_is_written_in_place(tmp_path: Path) -> None:
    want = expected_sample(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as f:
            received.append(f.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    code, _, err = run("sample", str(fifo), "-n", "20")
    thread.join(timeout=30)
    assert code == 0, err
    assert received == [want]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_dev_stdout_gets_the_data_and_python_m_kvroute_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvroute", "sample", "/dev/stdout", "-n", "5"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) == 5 and b"wrote 5 requests" in proc.stderr
    assert all("messages" in r["request"] for r in records), records[0]


def test_sample_dash_writes_to_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run("sample", "-", "-n", "3")
    assert code == 0, err
    assert all("messages" in json.loads(line)["request"] for line in out.splitlines())
    assert len(out.splitlines()) == 3 and "wrote 3 requests to stdout" in err
    assert list(tmp_path.iterdir()) == []


def test_python_m_kvroute_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvroute", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: kvroute ") and "analyze" in proc.stdout


@pytest.mark.parametrize("command", ["analyze", "simulate"])
@pytest.mark.parametrize("through_link", [False, True])
def test_output_that_is_the_input_is_refused_and_the_input_kept(
    tmp_path: Path, no_work: None, command: str, through_link: bool
) -> None:
    victim = tmp_path / "victim.jsonl"
    victim.write_text('{"request": {"messages": [{"role": "user", "content": "hi"}]}}\n')
    before = victim.read_bytes()
    out = victim
    if through_link:
        out = tmp_path / "alias.json"
        out.symlink_to(victim)
    code, _, err = run(command, str(victim), "--json", str(out))
    assert_one_line_usage_error(code, err, "--json", "input")
    assert victim.read_bytes() == before


def test_two_outputs_on_one_path_are_refused(tmp_path: Path, no_work: None) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    out = tmp_path / "out"
    code, _, err = run("analyze", str(trace), "--json", str(out), "--html", str(out))
    assert_one_line_usage_error(code, err, "--json", "--html")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["analyze", "{trace}", "--html", "{missing}"], "--html"),
        (["analyze", "{trace}", "--json", "{missing}"], "--json"),
        (["simulate", "{trace}", "--json", "{missing}"], "--json"),
        (["simulate", "{trace}", "--html", "{missing}"], "--html"),
        (["sample", "{missing}"], "OUT"),
        (["bench", "generate", "qa", "{missing}"], "OUT"),
        (["bench", "-e", "a=http://127.0.0.1:1", "--json", "{missing}"], "--json"),
        (["bench", "-e", "a=http://127.0.0.1:1", "--html", "{missing}"], "--html"),
    ],
)
def test_missing_directory_is_refused_before_work(
    tmp_path: Path, no_work: None, args: list[str], option: str
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    missing = tmp_path / "nonexist" / "out.x"
    argv = [a.format(trace=trace, missing=missing) for a in args]
    code, _, err = run(*argv)
    assert_one_line_usage_error(code, err, option, str(missing.parent), "does not exist")
    assert "mkdir -p" in err


def test_a_write_that_fails_is_one_line_and_the_device_stays(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("this system has no /dev/full")
    code, _, err = run("sample", "/dev/full", "-n", "5")
    assert code == 1 and err.startswith("error: could not write /dev/full"), err
    assert "internal error" not in err
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_piped_tables_keep_every_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal rich would lay tables out at 80 columns and drop the last one."""
    monkeypatch.delenv("COLUMNS", raising=False)
    trace = mooncake_trace(tmp_path / "mooncake.jsonl")
    code, piped, err = run("simulate", str(trace), "--capacity-tokens", "4k")
    assert code == 0, err
    monkeypatch.setenv("COLUMNS", "300")
    wide = run("simulate", str(trace), "--capacity-tokens", "4k")[1]

    def table(out: str) -> list[str]:
        rows = [line.rstrip() for line in out.splitlines() if line.startswith(" ")]
        return [
            r for r in rows if r.split()[:1] in (["engine"], ["llamacpp"], ["vllm"], ["sglang"])
        ]

    assert len(table(piped)) == 4 and table(piped)[0].endswith("rej."), piped
    assert table(piped) == table(wide)


@pytest.mark.engine
@pytest.mark.llamacpp
@pytest.mark.slow
def test_bench_json_dash_writes_the_result_to_stdout(llamacpp_server: EngineRecord) -> None:
    code, out, err = run(
        "bench",
        "-e",
        f"llama={llamacpp_server.base_url}",
        "-w",
        "qa",
        "-p",
        "output_tokens=4",
        "-p",
        "question_tokens=16",
        "-n",
        "2",
        "--concurrency",
        "1",
        "--no-overlap-check",
        "--json",
        "-",
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["schema"] == "kvroute.bench/1"
    assert len(result["runs"][0]["requests"]) == 2
    assert not Path("-").exists()


def mooncake_trace(path: Path, n: int = 40) -> Path:
    """A small hash-only trace: analyze and simulate read it without a tokenizer."""
    lines = [
        json.dumps(
            {
                "timestamp": i * 100,
                "input_length": 1500,
                "output_length": 8,
                "hash_ids": [1, 2, 10 + i],
            }
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("command", ["analyze", "simulate"])
def test_html_dash_writes_the_page_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    trace = mooncake_trace(tmp_path / "mooncake.jsonl")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(command, str(trace), "--html", "-")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>"), out[:200]
    # the terminal summary moved to stderr, and no file named "-" appeared
    assert "<!DOCTYPE" not in err and "mooncake.jsonl" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mooncake.jsonl"]


@pytest.mark.parametrize(
    ("first", "second"),
    [("-", "-"), ("-", "/dev/stdout"), ("/dev/stdout", "-")],
)
@pytest.mark.parametrize("command", ["analyze", "simulate"])
def test_two_outputs_on_stdout_are_refused(
    tmp_path: Path, no_work: None, command: str, first: str, second: str
) -> None:
    trace = mooncake_trace(tmp_path / "mooncake.jsonl")
    code, _, err = run(command, str(trace), "--json", first, "--html", second)
    assert_one_line_usage_error(code, err, "--json", "--html", "standard output")


def test_bench_report_html_dash_and_an_interrupted_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bench report R --html -``: the page on stdout, the summary on stderr; a result
    cut by Ctrl-C says so at the top of both."""
    from bench.fake_upstream import fake_upstream

    saved = tmp_path / "r.json"
    with fake_upstream() as up:
        code, _, err = run(
            "bench", "-e", f"fake={up.url},model=ok", "-w", "qa", "-n", "4",
            "--concurrency", "1,2", "--no-overlap-check", "--json", str(saved), "-q",
        )  # fmt: skip
    assert code == 0, err
    doc = json.loads(saved.read_bytes())
    doc["interrupted"] = doc["runs"][-1]["interrupted"] = True
    saved.write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    code, out, err = run("bench", "report", str(saved), "--html", "-")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>") and "Interrupted by Ctrl-C" in out
    assert out.index("Interrupted by Ctrl-C") < out.index("<table")
    assert err.startswith("INTERRUPTED BY CTRL-C") and "1 finished run and 1 cut short" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    code, out, err = run("bench", "compare", str(saved), str(saved), "--json", "-", "--html", "-")
    assert_one_line_usage_error(code, err, "--json", "--html", "standard output")
