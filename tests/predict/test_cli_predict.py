"""``kvroute predict`` end to end on synthetic loads, and its one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from kvroute.cli.main import build_cli

BASE = [
    "predict",
    "--workload",
    "fixed:isl=1000,osl=50,n=40",
    "--engine",
    "vllm",
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "h100-80gb",
    "--samples",
    "3",
]


def _run(args: list[str]) -> tuple[int, str, str]:
    r = CliRunner().invoke(build_cli(), args)
    return r.exit_code, r.stdout, r.stderr


def test_predict_writes_the_documented_json(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    code, stdout, _ = _run([*BASE, "--concurrency", "4", "--json", str(out)])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["kvroute_prediction"] == 1
    ttft = doc["summary_s"]["ttft"]["p50"]
    assert ttft["ci95"][0] <= ttft["value"] <= ttft["ci95"][1]
    assert len(doc["requests"]["ttft_s"]) == 40
    assert doc["saturation"]["saturated"] is False
    assert "TTFT" in stdout and "closed loop" in stdout


def test_a_rate_past_capacity_is_called_saturated() -> None:
    args = [
        "predict",
        "--workload",
        "fixed:isl=4000,osl=200,n=60",
        "--engine",
        "llamacpp",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-80gb",
        "--samples",
        "2",
        "--rate",
        "50",
    ]
    code, stdout, _ = _run(args)
    assert code == 0
    assert "SATURATED" in stdout
    assert "prior" in stdout  # no llama.cpp GPU calibration ships: it says so


def test_unknown_gpu_model_and_bad_workload_are_one_line_usage_errors() -> None:
    for args, needle in (
        (
            [*BASE[:-4], "--gpu", "tpu9", "--samples", "3", "--concurrency", "2"],
            "unknown GPU 'tpu9'",
        ),
        (
            [
                "predict",
                "--workload",
                "fixed:isl=1000,osl=50",
                "-e",
                "vllm",
                "-m",
                "gpt-9",
                "-g",
                "h200",
                "--concurrency",
                "2",
            ],
            "unknown model 'gpt-9'",
        ),
        (
            [
                "predict",
                "--workload",
                "fixed:isl=abc",
                "-e",
                "vllm",
                "-m",
                "llama-3.1-8b",
                "-g",
                "h200",
                "--concurrency",
                "2",
            ],
            "isl must be an integer",
        ),
        (
            [
                "predict",
                "--workload",
                "poisson:x",
                "-e",
                "vllm",
                "-m",
                "llama-3.1-8b",
                "-g",
                "h200",
                "--concurrency",
                "2",
            ],
            "cannot read workload",
        ),
        (
            [
                "predict",
                "--workload",
                "fixed:isl=10,osl=5",
                "-e",
                "vllm",
                "-m",
                "llama-3.1-8b",
                "-g",
                "a10g",
                "--concurrency",
                "2",
            ],
            "no speed data",
        ),
    ):
        code, _, stderr = _run(args)
        assert code == 2, args
        assert stderr.startswith("error: ") and needle in stderr, stderr
        assert "Traceback" not in stderr


def test_a_calibration_for_another_engine_is_refused(tmp_path: Path) -> None:
    from kvroute.predict.calibration import shipped_priors

    sglang = next(c for c in shipped_priors() if c.engine == "sglang")
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(sglang.to_json()))
    code, _, stderr = _run([*BASE, "--concurrency", "2", "--calibration", str(path)])
    assert code == 2
    assert "calibration is for engine 'sglang', not 'vllm'" in stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"kvroute_calibration": 1, "features": []}')
    code, _, stderr = _run([*BASE, "--concurrency", "2", "--calibration", str(bad)])
    assert code == 3 and "field 'features'" in stderr


def test_predict_a_trace_uses_its_times_and_the_cache_models_hits(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    assert _run(["sample", str(trace)])[0] == 0
    out = tmp_path / "p.json"
    args = [
        "predict",
        str(trace),
        "-e",
        "sglang",
        "-m",
        "llama-3.1-8b",
        "-g",
        "h100-80gb",
        "--samples",
        "2",
        "--json",
        str(out),
    ]
    code, _, stderr = _run(args)
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["load"] == "the trace's arrival times"
    assert doc["num_requests"] == 600 and doc["num_rejected"] == 0
    assert doc["hit_ratio"] > 0.3  # the sample's shared system prompts and sessions hit
    assert sum(doc["requests"]["cached_tokens"]) > 0


def test_the_terminal_table_fits_80_columns_with_every_interval_whole() -> None:
    r = CliRunner().invoke(build_cli(), [*BASE, "--concurrency", "4"], env={"COLUMNS": "80"})
    assert r.exit_code == 0
    rows = [line for line in r.stdout.splitlines() if re.search(r"\bp(50|90|99)\b", line)]
    assert len(rows) == 12  # 4 metrics × 3 percentiles, a line each
    for line in rows:
        assert len(line) <= 80 and re.search(r"[\d.,]+ +[\d.,]+–[\d.,]+ +[\d.,]+–[\d.,]+ *$", line)


def test_html_report_leads_with_the_verdict_and_shows_the_split(tmp_path: Path) -> None:
    out = tmp_path / "p.html"
    code, _, stderr = _run([*BASE, "--rate", "400", "--html", str(out)])
    assert code == 0, stderr
    page = out.read_text()
    verdict = page.index("saturated")
    assert verdict < page.index("Latency") < page.index("the TTFT split")
    for part in ("queue", "uncached prefill", "cached-context attention", "overhead"):
        assert f"vllm · {part}:" in page  # one stacked segment per part, with its tooltip
    assert page.count("<svg") >= 4  # the split and the TTFT/TPOT/E2E distributions
    assert "SATURATED" in page


def test_a_kv_bound_vllm_run_says_requests_were_preempted(tmp_path: Path) -> None:
    # 8 clients x (1000 + 799) tokens at their ends need ~14.4 k tokens of KV; an 8 k pool
    # admits on the prompts and preempts as the decodes grow.
    out = tmp_path / "p.json"
    args = [*BASE, "--workload", "fixed:isl=1000,osl=800,n=16", "--concurrency", "8"]
    code, _, _ = _run([*args, "--capacity-tokens", "8000", "--json", str(out)])
    assert code == 0
    notes = json.loads(out.read_text())["notes"]
    assert any("were preempted when KV blocks ran out" in n for n in notes), notes
    code, _, _ = _run([*args, "--json", str(out)])
    assert code == 0
    assert not any("preempted" in n for n in json.loads(out.read_text())["notes"])
