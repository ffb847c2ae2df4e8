"""``kvroute bench`` through the real CLI (registered as main.py's COMMANDS entry will)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from bench.fake_upstream import fake_upstream
from kvroute.bench.result import load_result
from kvroute.cli import main

ENTRY = (
    "kvroute.cli.bench.command",
    "bench_group",
    "Benchmark endpoints with workload-shaped load, side by side.",
)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setitem(main.COMMANDS, "bench", ENTRY)
    return CliRunner()


def run(cli: CliRunner, *args: str) -> Result:
    return cli.invoke(main.build_cli(), list(args), catch_exceptions=False)


def test_workloads_lists_every_generator_with_parameters(cli: CliRunner) -> None:
    out = run(cli, "bench", "workloads")
    assert out.exit_code == 0
    for name in ("qa", "rag", "multiturn", "agent", "json", "code", "mix", "replay", "synth"):
        assert f"\n{name} " in "\n" + out.output
    assert "``" not in out.output  # plain text, not the docstrings' reST marks
    assert "tool calls and tool results; some steps fork sub-agents" in out.output
    assert "overlap" in run(cli, "bench", "workloads", "rag").output


def test_generated_workload_is_analyzed_with_its_overlap(cli: CliRunner, tmp_path: Path) -> None:
    log = tmp_path / "rag.jsonl"
    assert (
        run(cli, "bench", "generate", "rag", str(log), "-n", "60", "-p", "overlap=0.5").exit_code
        == 0
    )
    out = tmp_path / "a.json"
    assert run(cli, "analyze", str(log), "-q", "--json", str(out), "--workers", "1").exit_code == 0
    assert orjson.loads(out.read_bytes())["overlap"]["hit_ratio"] == pytest.approx(0.5, abs=0.02)


def test_run_report_and_compare(cli: CliRunner, tmp_path: Path) -> None:
    a, b, html = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "a.html"
    with fake_upstream() as up:
        common = [
            "-w",
            "qa",
            "-n",
            "6",
            "--concurrency",
            "2",
            "--cache",
            "warm",
            "--slo",
            "ttft=1s",
        ]
        out = run(
            cli,
            "bench",
            "-e",
            f"fake={up.url},model=ok",
            *common,
            "--json",
            str(a),
            "--html",
            str(html),
        )
        assert out.exit_code == 0, out.output
        out = run(
            cli,
            "bench",
            "-e",
            f"fake={up.url},model=split",
            *common,
            "--rate",
            "20",
            "--concurrency",
            "2",
            "--json",
            str(b),
        )
        assert out.exit_code == 2 and "one of --rate" in out.output
        out = run(
            cli,
            "bench",
            "-e",
            f"fake={up.url},model=split",
            "-w",
            "qa",
            "-n",
            "6",
            "--concurrency",
            "2",
            "--json",
            str(b),
            "-q",
        )
        assert out.exit_code == 0
    result = load_result(a)
    assert result.workload.ideal_overlap is not None and result.runs[0].summary.num_ok == 6
    assert result.runs[0].summary.goodput is not None
    assert "<svg" in html.read_text()
    out = run(
        cli,
        "bench",
        "compare",
        str(a),
        str(b),
        "--html",
        str(tmp_path / "c.html"),
        "--json",
        str(tmp_path / "c.json"),
    )
    assert out.exit_code == 0 and "TTFT p50" in out.output
    assert orjson.loads((tmp_path / "c.json").read_bytes())[0]["load"] == "concurrency=2"
    assert (
        run(cli, "bench", "report", str(a), "--html", str(tmp_path / "again.html")).exit_code == 0
    )


def test_an_endpoint_that_does_not_answer_is_refused_before_the_run(
    cli: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "r.json"
    path.write_text("an earlier result")
    started = time.monotonic()
    out = run(
        cli,
        "bench",
        "-e",
        "dead=http://127.0.0.1:9",
        "-w",
        "code",
        "-n",
        "3",
        "--json",
        str(path),
    )
    assert out.exit_code == 5, out.output
    assert "endpoint dead (http://127.0.0.1:9) does not answer" in out.output
    assert "hint:" in out.output and "Traceback" not in out.output
    assert path.read_text() == "an earlier result"  # nothing ran, nothing was replaced
    assert time.monotonic() - started < 10  # refused up front, not after the workload check


def test_a_run_where_no_request_succeeded_exits_1_after_writing(
    cli: CliRunner, tmp_path: Path
) -> None:
    # A server that answers every request with 500 (a fault an engine cannot be made to
    # produce on demand) next to a healthy one, in a two-step sweep.
    path, old_html = tmp_path / "r.json", tmp_path / "r.html"
    old_html.write_text("<html>an earlier run</html>")
    with fake_upstream() as up:
        out = run(
            cli,
            "bench",
            "-e",
            f"good={up.url},model=ok",
            "-e",
            f"bad={up.url},model=http500",
            "-w",
            "qa",
            "-n",
            "3",
            "--concurrency",
            "1,2",
            "--no-overlap-check",
            "--json",
            str(path),
        )
    assert out.exit_code == 1, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("error:"))
    assert f"bad ({up.url}) at concurrency=1: no request succeeded; http_5xx (3 of 3)" in line
    assert line.startswith("error: 2 runs served no request; bad") and "boom" in line
    assert f"note: {old_html} is from an earlier run" in out.output
    result = load_result(path)  # written all the same, every run
    assert [(r.endpoint.name, r.summary.num_ok) for r in result.runs] == [
        ("good", 3),
        ("bad", 0),
        ("good", 3),
        ("bad", 0),
    ]
    assert not result.interrupted


def test_usage_errors_exit_2_with_valid_names(cli: CliRunner) -> None:
    out = run(cli, "bench", "-w", "rag")
    assert out.exit_code == 2 and "no endpoint" in out.output
    out = run(cli, "bench", "-e", "x=http://127.0.0.1:9", "-w", "rag", "-p", "colour=red")
    assert out.exit_code == 2 and "valid: prompt_tokens" in out.output
    out = run(cli, "bench", "-e", "x=http://127.0.0.1:9", "-w", "nope")
    assert out.exit_code == 2 and "valid: agent" in out.output
    out = run(cli, "bench", "-e", "x=http://127.0.0.1:9,engine=tgi", "-w", "qa", "-n", "1")
    assert out.exit_code == 2 and "valid: llamacpp, sglang, vllm" in out.output


def test_the_default_result_file_is_never_overwritten_silently(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.json").write_text("an earlier result")
    args = ["bench", "-e", "dead=http://127.0.0.1:9", "-w", "qa", "-n", "2"]
    out = run(cli, *args)
    assert out.exit_code == 2, out.output
    assert "bench.json exists (an earlier bench result); not overwriting it" in out.output
    assert "--force" in out.output and "--json NEW.json" in out.output
    assert (tmp_path / "bench.json").read_text() == "an earlier result"
    # --force gets past the refusal (to the dead endpoint); an explicit --json is a choice.
    assert run(cli, *args, "--force").exit_code == 5
    assert run(cli, *args, "--json", "bench.json").exit_code == 5


def _small_result(cli: CliRunner, path: Path, *extra: str) -> None:
    with fake_upstream() as up:
        out = run(
            cli,
            "bench",
            "-e",
            f"fake={up.url},model=ok",
            "-w",
            "qa",
            "-n",
            "4",
            "--concurrency",
            "2",
            "--no-overlap-check",
            "--json",
            str(path),
            "-q",
            *extra,
        )
    assert out.exit_code == 0, out.output


def test_compare_refuses_different_experiments_unless_forced(
    cli: CliRunner, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _small_result(cli, a)
    _small_result(cli, b, "--seed", "5")
    out = run(cli, "bench", "compare", str(a), str(b))
    assert out.exit_code == 2, out.output
    assert "are different experiments (seed 0 vs 5)" in out.output and "--force" in out.output
    html = tmp_path / "c.html"
    out = run(cli, "bench", "compare", str(a), str(b), "--force", "--html", str(html))
    assert out.exit_code == 0, out.output
    assert "warning: A and B are different experiments" in out.output
    assert "A and B are different experiments" in html.read_text()
    _small_result(cli, b)  # the same requests on the same schedule: compared as before
    out = run(cli, "bench", "compare", str(a), str(b))
    assert out.exit_code == 0 and "different experiments" not in out.output


def test_unsent_and_cut_requests_are_not_counted_as_errors(cli: CliRunner, tmp_path: Path) -> None:
    import dataclasses

    from kvroute.report.bench.rows import RUN_HEADERS, error_lines, run_row

    path = tmp_path / "a.json"
    _small_result(cli, path)
    run_ = load_result(path).runs[0]
    # What Ctrl-C leaves: 2 answered, 1 failed, 1 cut on the wire, 26 never sent.
    summary = dataclasses.replace(
        run_.summary,
        num_ok=2,
        num_errors=2,
        num_not_sent=26,
        errors={"http_5xx": 1, "interrupted": 1},
    )
    row = dict(zip(RUN_HEADERS, run_row(dataclasses.replace(run_, summary=summary)), strict=True))
    assert (row["ok"], row["errors"], row["unsent/cut"]) == ("2", "1", "27")
    lines = error_lines(dataclasses.replace(run_, summary=summary))
    assert lines == ["http_5xx 1", "not sent 26", "cut short by Ctrl-C 1"]


def test_an_endpoint_takes_the_threads_engines_up_recorded_unless_given() -> None:
    from kvroute.bench.run_options import Endpoint, with_recorded_compute
    from kvroute.engines.state import EngineRecord

    rec = EngineRecord(
        "llamacpp", 8080, "http://127.0.0.1:8080", "m", 1, 1, 0.0, "/l", (), threads=2, cpus=(0, 1)
    )
    got = with_recorded_compute(Endpoint.parse("a=http://127.0.0.1:8080/v1"), [rec])
    assert (got.threads, got.cpus) == (2, (0, 1))
    given = with_recorded_compute(Endpoint.parse("a=http://127.0.0.1:8080,threads=1"), [rec])
    assert given.threads == 1
    other = with_recorded_compute(Endpoint.parse("a=http://127.0.0.1:9999"), [rec])
    assert (other.threads, other.cpus) == (None, ())
