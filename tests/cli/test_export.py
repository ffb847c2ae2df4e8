"""``kvroute export`` through the real CLI: key file made on first use and reused,
keyed hashes, the export analyzes like the original, bad key files refused."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "s.jsonl"
    assert run("sample", str(path), "-n", "120")[0] == 0
    return path


def _hashes(path: Path) -> list[list[int]]:
    return [json.loads(line)["hashes"] for line in path.read_text().splitlines()[1:]]


def test_export_keyed_and_analyzable(tmp_path: Path, sample: Path) -> None:
    key = tmp_path / "keys" / "trace.key"
    one, two, other = tmp_path / "1.jsonl", tmp_path / "2.jsonl", tmp_path / "3.jsonl"
    code, _, err = run("export", str(sample), str(one), "--key-file", str(key), "--workers", "1")
    assert code == 0, err
    assert "created key file" in err and "wrote 120 requests" in err
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    code, _, err = run("export", str(sample), str(two), "--key-file", str(key), "--workers", "1")
    assert code == 0 and "created" not in err
    assert _hashes(one) == _hashes(two)
    code, _, _ = run(
        "export", str(sample), str(other), "--key-file", str(tmp_path / "k2"), "--workers", "1"
    )
    assert code == 0 and _hashes(other)[0][0] != _hashes(one)[0][0]
    assert "Current" not in one.read_text() and "support agent" not in one.read_text()
    # the export's block-level overlap is the original's
    code, original, _ = run(
        "analyze", str(sample), "-q", "--workers", "1", "--no-breakers", "--json", "-"
    )
    code2, exported, _ = run("analyze", str(one), "-q", "--json", "-")
    assert code == code2 == 0
    assert json.loads(exported)["overlap"]["block_hit_ratio"] == pytest.approx(
        json.loads(original)["overlap"]["block_hit_ratio"]
    )


def test_export_mooncake_layout(tmp_path: Path, sample: Path) -> None:
    out = tmp_path / "m.jsonl"
    code, _, err = run(
        "export",
        str(sample),
        str(out),
        "--to",
        "mooncake",
        "--key-file",
        str(tmp_path / "k"),
        "--workers",
        "1",
    )
    assert code == 0, err
    first = json.loads(out.read_text().splitlines()[0])
    assert {"timestamp", "input_length", "hash_ids", "block_size", "key_id"} <= set(first)
    code, exported, _ = run("analyze", str(out), "-q", "--json", "-")
    assert code == 0 and json.loads(exported)["trace"]["block_size_tokens"] == 16


def test_bad_key_file(tmp_path: Path, sample: Path) -> None:
    key = tmp_path / "bad.key"
    key.write_text("not hex\n")
    code, _, err = run("export", str(sample), str(tmp_path / "o.jsonl"), "--key-file", str(key))
    assert code == 3 and "not a trace key" in err and "Traceback" not in err
    code, _, err = run("export", str(sample), "-", "--key-file", str(key))
    assert code == 2
