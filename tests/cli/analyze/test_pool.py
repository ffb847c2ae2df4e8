"""The verdict at the user's KV pool: ``kvroute analyze --capacity-tokens``.

A constructed Mooncake trace: 100 documents of 10 blocks (512 tokens each), the whole
set sent three times in the same order. Two of every three prompts repeat an earlier one
(ideal 66.7 %: radix pays), but each repeat comes 100 documents, 512,000 tokens, after the
last time, so an LRU cache smaller than that serves nothing and one larger serves it all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli

DOCS, BLOCKS, BLOCK = 100, 10, 512
WORKING_SET = DOCS * BLOCKS * BLOCK  # 512,000 tokens


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "cyclic.jsonl"
    lines = []
    for rnd in range(3):
        for d in range(DOCS):
            ids = list(range(d * BLOCKS, (d + 1) * BLOCKS))
            t = (rnd * DOCS + d) * 1000
            rec = {"timestamp": t, "input_length": BLOCKS * BLOCK, "output_length": 10}
            lines.append(json.dumps({**rec, "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _verdict(trace: Path, tmp_path: Path, *extra: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "r.json"
    code, stdout, err = run("analyze", str(trace), "--no-breakers", "--json", str(out), *extra)
    assert code == 0, err
    data = json.loads(out.read_text())
    return data, stdout


def test_ideal_says_radix_pays_without_a_pool(trace: Path, tmp_path: Path) -> None:
    data, _ = _verdict(trace, tmp_path)
    assert data["overlap"]["hit_ratio"] == pytest.approx(2 / 3)
    assert data["verdict"]["level"] == "radix_pays"
    # The breakers' default capacity (256Ki) is not the user's pool.
    assert data["reuse"]["pool"] is None


def test_a_pool_too_small_for_the_reuse_decides_the_verdict(trace: Path, tmp_path: Path) -> None:
    data, stdout = _verdict(trace, tmp_path, "--capacity-tokens", "256Ki")
    pool = data["reuse"]["pool"]
    assert pool["capacity_tokens"] == 262_144
    assert pool["lru_hit_ratio"] == 0.0  # every repeat is 512,000 tokens back
    assert data["verdict"]["level"] == "equivalent"
    headline = data["verdict"]["headline"]
    assert "262,144 tokens" in headline and "66.7 % with unlimited memory" in headline
    assert "larger KV pool would change this verdict" in headline
    assert "your pool 256Ki" in stdout  # the pool's row in the capacity table


def test_the_page_marks_the_pool(trace: Path, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    code, _, err = run(
        "analyze",
        str(trace),
        "--no-breakers",
        "-q",
        "--capacity-tokens",
        "256Ki",
        "--html",
        str(page),
    )
    assert code == 0, err
    html = page.read_text()
    assert "your pool 256Ki" in html and "the verdict is decided on the LRU figure" in html


def test_a_pool_that_holds_the_reuse_keeps_the_ideal_verdict(trace: Path, tmp_path: Path) -> None:
    data, _ = _verdict(trace, tmp_path, "--capacity-tokens", "1Mi")
    assert data["reuse"]["pool"]["lru_hit_ratio"] == pytest.approx(2 / 3)
    assert data["verdict"]["level"] == "radix_pays"
    assert "larger KV pool" not in data["verdict"]["headline"]
    assert any("holds the whole reuse" in r for r in data["verdict"]["reasons"])


# The pool sized from a model on GPUs, as `kvroute simulate --model --gpu` sizes it.
# llama-3.1-8b (128 KiB of KV per token, 15 GiB of weights) on one H100 80GB at 90 %:
# 448,308 tokens, under the 512,000-token working set; on two, about a million.
ONE_H100 = 448_308


def test_model_on_a_gpu_sizes_the_pool_that_decides_the_verdict(
    trace: Path, tmp_path: Path
) -> None:
    data, _ = _verdict(trace, tmp_path, "--model", "llama-3.1-8b", "--gpu", "h100-80gb")
    pool = data["reuse"]["pool"]
    assert pool["capacity_tokens"] == ONE_H100
    assert pool["sized_from"] == "llama-3.1-8b on 1 x NVIDIA H100 80GB HBM3 at 90% of memory"
    assert pool["lru_hit_ratio"] == 0.0
    assert data["verdict"]["level"] == "equivalent"
    assert f"{ONE_H100:,} tokens (llama-3.1-8b on 1 x NVIDIA H100" in data["verdict"]["headline"]
    assert data["breakers"] is None  # --no-breakers


def test_more_gpus_or_less_memory_move_the_pool(trace: Path, tmp_path: Path) -> None:
    two, _ = _verdict(
        trace, tmp_path, "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--num-gpus", "2"
    )
    assert two["reuse"]["pool"]["capacity_tokens"] > WORKING_SET
    assert two["verdict"]["level"] == "radix_pays"
    half, _ = _verdict(
        trace, tmp_path, "--gpu", "h100-80gb", "--num-gpus", "2", "--gpu-util", "0.5"
    )  # --gpu alone: llama-3.1-8b, as simulate
    assert half["reuse"]["pool"]["sized_from"].startswith("llama-3.1-8b on 2 x")
    assert half["reuse"]["pool"]["capacity_tokens"] < WORKING_SET
    assert half["verdict"]["level"] == "equivalent"
    fp8, _ = _verdict(trace, tmp_path, "--model", "llama-3.1-8b", "--kv-dtype", "fp8")
    assert fp8["reuse"]["pool"]["capacity_tokens"] == pytest.approx(2 * ONE_H100, abs=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama-9"], "error: unknown model 'llama-9' (valid presets:"),
        (["--gpu", "h900"], "error: unknown GPU 'h900' (valid:"),
        (["--model", "llama-3.1-70b", "--gpu", "rtx4090"], "leaves no KV memory"),
        (
            ["--capacity-tokens", "1Mi", "--model", "llama-3.1-8b"],
            "error: --capacity-tokens and --model both size the KV pool; give one",
        ),
        (
            ["--capacity-tokens", "none", "--gpu", "h100-80gb"],
            "error: --capacity-tokens and --gpu both size the KV pool; give one",
        ),
        (["--num-gpus", "4"], "error: --num-gpus sizes a pool from --model/--gpu"),
        (
            ["--capacity-tokens", "1Mi", "--kv-dtype", "fp8"],
            "error: --kv-dtype sizes a pool from --model/--gpu",
        ),
    ],
)
def test_a_pool_that_cannot_be_sized_is_one_line_and_exit_2(
    trace: Path, args: list[str], message: str
) -> None:
    code, _, err = run("analyze", str(trace), "--no-breakers", "-q", *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
