"""``kvroute sample`` + ``kvroute analyze`` end to end through the real CLI, and its bad-input paths."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli
from kvroute.trace.records import Request, TokenPrompt
from kvroute.trace.writer import TraceWriter


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sample") / "sample.jsonl"
    code, out, _ = run("sample", str(path), "-n", "200")
    assert code == 0 and "200 requests" in out
    return path


def test_sample_is_deterministic(tmp_path: Path, sample: Path) -> None:
    again = tmp_path / "again.jsonl"
    assert run("sample", str(again), "-n", "200")[0] == 0
    assert again.read_bytes() == sample.read_bytes()


def test_analyze_writes_json_and_html(tmp_path: Path, sample: Path) -> None:
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code, out, err = run(
        "analyze", str(sample), "--json", str(out_json), "--html", str(out_html), "--workers", "1"
    )
    assert code == 0, err
    assert "Verdict" in out and "prefix overlap" in out
    result = json.loads(out_json.read_text())
    assert result["schema"] == "kvroute.analyze/1"
    assert result["trace"]["num_requests"] == 200 and result["trace"]["prompt_form"] == "tokens"
    ov = result["overlap"]
    assert 0 < ov["block_hit_ratio"] <= ov["hit_ratio"] < 1
    # Every chat prompt starts with the template's head; the terminal names that threshold.
    assert 0 < ov["common_prefix_tokens"] < 16 and "requests reusing more than that" in out
    # The agent system prompt is the biggest shared prefix, and it is shown as text.
    top = result["groups"]["top"][0]
    assert top["start_tokens"] == 0 and "support agent" in top["preview_head"]
    html = out_html.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "support agent" in html
    assert "http://" not in html.replace("http://www.w3.org", "")


def test_no_text_keeps_prompts_out(tmp_path: Path, sample: Path) -> None:
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code, out, _ = run(
        "analyze",
        str(sample),
        "--no-text",
        "--json",
        str(out_json),
        "--html",
        str(out_html),
        "--workers",
        "1",
    )
    assert code == 0
    for text in (out, out_json.read_text(), out_html.read_text()):
        assert "support agent" not in text


def test_json_to_stdout_is_pure_json(sample: Path) -> None:
    code, out, _ = run("analyze", str(sample), "--json", "-", "-q", "--workers", "1")
    assert code == 0
    assert json.loads(out)["verdict"]["level"] in {"equivalent", "grey_zone", "radix_pays"}


def test_bad_record_exit_3_one_line_no_traceback(tmp_path: Path, sample: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = sample.read_text().splitlines()[:5]
    lines.insert(
        3,
        json.dumps(
            {
                "request": {
                    "model": "m",
                    "messages": [{"role": "user", "content": "x"}, {"content": "y"}],
                }
            }
        ),
    )
    bad.write_text("\n".join(lines) + "\n")
    code, out, err = run("analyze", str(bad), "--workers", "1")
    assert code == 3
    assert f"{bad}:4, field 'request.messages[1].role'" in err
    assert "Traceback" not in err + out
    code, out, err = run(
        "analyze", str(bad), "--skip-invalid", "--workers", "1", "--json", str(tmp_path / "ok.json")
    )
    assert code == 0 and "skipped 1 invalid record (line 4), e.g." in out
    # simulate says the same, where the skipped records are
    code, _, err = run("simulate", str(bad), "--skip-invalid", "--capacity-tokens", "8k")
    assert code == 0 and "skipped 1 invalid record (line 4)" in err + _
    assert json.loads((tmp_path / "ok.json").read_text())["trace"]["num_skipped"] == 1


def test_existing_report_survives_a_failed_run(tmp_path: Path) -> None:
    report = tmp_path / "keep.json"
    report.write_text("previous")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = run("analyze", str(empty), "--json", str(report))
    assert code == 3 and "empty" in err
    assert report.read_text() == "previous"


def test_usage_errors(tmp_path: Path) -> None:
    code, _, err = run("analyze", str(tmp_path / "nope.jsonl"))
    assert code == 3 and "no such file" in err
    code, _, err = run("analyze", "x.jsonl", "--format", "csv")
    assert code == 2 and "csv" in err
    unknown = tmp_path / "u.jsonl"
    unknown.write_text('{"hello": 1}\n')
    code, _, err = run("analyze", str(unknown))
    assert code == 3 and "--format" in err


def test_missing_tokenizer_exit_4(tmp_path: Path, sample: Path) -> None:
    code, _, err = run(
        "analyze", str(sample), "--tokenizer", str(tmp_path / "missing.gguf"), "--workers", "1"
    )
    assert code == 4 and "missing.gguf" in err
    assert "hint: give a GGUF model file or a Hugging Face tokenizer directory" in err


def test_mooncake_trace_needs_no_tokenizer(tmp_path: Path) -> None:
    trace = tmp_path / "mc.jsonl"
    recs = [
        {
            "timestamp": i * 100,
            "input_length": 1500,
            "output_length": 20,
            "hash_ids": [1, 2, 3 + i % 2],
        }
        for i in range(10)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, out, _ = run("analyze", str(trace), "--json", "-", "-q")
    assert code == 0
    res = json.loads(out)
    assert res["overlap"]["granularity"] == "block" and res["trace"]["tokenizer"] is None
    # 1024 tokens of two shared blocks for 9 requests, plus 8 repeats of a whole 3rd block (476 tokens).
    assert res["overlap"]["reusable_tokens"] == 9 * 1024 + 8 * 476
    assert res["trace"]["block_size_tokens"] == 512  # Mooncake's, not --block-size's default
    # An explicit size is taken at its word, 16 too (it was ignored as the default before).
    code, _, err = run("analyze", str(trace), "-q", "--block-size", "16")
    assert code == 3 and "3 blocks of 16 tokens cannot hold 1500 tokens" in err


def _with_model(sample: Path, out: Path, model: str) -> Path:
    lines = []
    for line in sample.read_text().splitlines()[:20]:
        rec = json.loads(line)
        rec["request"]["model"] = model
        lines.append(json.dumps(rec))
    out.write_text("\n".join(lines) + "\n")
    return out


def test_warns_once_when_the_trace_is_for_another_model(tmp_path: Path, sample: Path) -> None:
    trace = _with_model(sample, tmp_path / "gpt.jsonl", "gpt-4o")
    html = tmp_path / "a.html"
    code, out, err = run(
        "analyze", str(trace), "--json", "-", "--html", str(html), "-q", "--workers", "1"
    )
    assert code == 0 and json.loads(out)["trace"]["models"] == {"gpt-4o": 20}
    (line,) = err.splitlines()
    assert line.startswith("warning: token counts come from tokenizer SmolLM2-135M-Instruct")
    assert "gpt-4o (20 requests)" in line and "--tokenizer PATH" in line
    # The same warning travels with the results, not only on stderr.
    assert json.loads(out)["trace"]["tokenizer_warning"] == line.removeprefix("warning: ")
    assert "Wrong tokenizer?" in html.read_text() and "gpt-4o (20 requests)" in html.read_text()
    sim_html = tmp_path / "s.html"
    code, out, err = run(
        "simulate", str(trace), "--json", "-", "--html", str(sim_html), "--capacity-tokens", "64k"
    )
    assert code == 0, err
    assert "gpt-4o (20 requests)" in json.loads(out)["trace"]["tokenizer_warning"]
    assert "warning: token counts come from tokenizer" in err
    page = sim_html.read_text()
    assert "Wrong tokenizer?" in page and "gpt-4o (20 requests)" in page


def test_no_model_warning_when_names_match_or_nothing_is_tokenized(
    tmp_path: Path, sample: Path
) -> None:
    trace = _with_model(sample, tmp_path / "hf.jsonl", "HuggingFaceTB/SmolLM2-135M-Instruct")
    code, _, err = run("analyze", str(trace), "--json", "-", "-q", "--workers", "1")
    assert code == 0 and "warning" not in err
    # A hash-only trace naming another model: nothing is tokenized, nothing to warn about.
    hashed = tmp_path / "hashed.jsonl"
    with TraceWriter(hashed, block_size_tokens=16) as w:
        for i in range(4):
            ids = np.arange(i, i + 40, dtype=np.uint32)
            w.append(Request(prompt=TokenPrompt(ids), model="gpt-4o", arrival_s=float(i)))
    code, out, err = run("analyze", str(hashed), "--json", "-", "-q")
    assert code == 0 and json.loads(out)["trace"]["models"] == {"gpt-4o": 4}
    assert "warning" not in err


def test_a_top_larger_than_the_trace_says_every_shared_prefix_is_shown(sample: Path) -> None:
    code, out, _ = run("analyze", str(sample), "--top", "100000", "--workers", "1")
    assert code == 0
    found = re.search(r"all ([\d,]+) shared prefixes the trace has", out)
    assert found is not None, out
    code, out, _ = run("analyze", str(sample), "--top", "2", "--workers", "1")
    assert f"the top 2 of {found.group(1)} shared prefixes (--top N shows more)" in out
