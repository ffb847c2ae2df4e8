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
