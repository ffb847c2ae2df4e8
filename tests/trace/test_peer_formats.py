"""Hash-only traces written by peers: kvcache-simulator's inputs (per-record
``block_size``, string ids, ``block_tokens``), llmtrafficlens' exports (no hash for the
partial last block) and Alibaba's Bailian/Qwen traces (conversations by parent id)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvroute.analyze.run import analyze_requests
from kvroute.errors import InputError
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.readers import detect_format, read_trace
from kvroute.trace.records import BlockPrompt, Request


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _prompt(r: Request) -> BlockPrompt:
    assert isinstance(r.prompt, BlockPrompt)
    return r.prompt


def _hit(reqs: list[Request]) -> float:
    res = analyze_requests(reqs, trace_path="t", trace_format="t", tokenizer_name=None)
    return res.overlap.hit_ratio


def test_kvcache_simulator_records(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "ks.jsonl",
        [
            {
                "block_size": 16,
                "input_length": 40,
                "hash_ids": ["sys", "a", "t1"],
                "block_tokens": [16, 16, 8],
            },
            {"block_size": 16, "input_length": 48, "hash_ids": ["sys", "a", "b"]},
            {"block_size": 16, "input_length": 32, "hash_ids": [7, 8]},
        ],
    )
    assert detect_format(path) == "mooncake"
    reqs = list(read_trace(path))
    assert [_prompt(r).block_size_tokens for r in reqs] == [16, 16, 16]
    a, b, _ = (_prompt(r).block_hashes for r in reqs)
    assert a[:2].tolist() == b[:2].tolist() and a[2] != b[2]  # equal strings, equal ids
    # request 2 reuses its first two blocks (32 of 48 tokens): 32 / 120
    assert _hit(reqs) == pytest.approx(32 / 120)
    # --block-size still wins over the records' own
    with pytest.raises(InputError, match="cannot hold"):
        list(read_trace(path, options=ReadOptions(block_size_tokens=512)))


def test_kvcache_simulator_rejects_a_bad_block_size(tmp_path: Path) -> None:
    path = _write(tmp_path / "ks.jsonl", [{"block_size": 0, "input_length": 4, "hash_ids": [1]}])
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    assert (err.value.line, err.value.field) == (1, "block_size")


def test_llmtrafficlens_export_without_partial_block_hashes(tmp_path: Path) -> None:
    """Its export drops the trailing partial block: 45 tokens in 16-token blocks carry
    two hashes, a 10-token prompt none. Every record reads; the unhashed tails never match."""
    path = _write(
        tmp_path / "lt.jsonl",
        [
            {"timestamp": 0, "input_length": 45, "output_length": 3, "hash_ids": [11, 12]},
            {"timestamp": 5, "input_length": 45, "output_length": 3, "hash_ids": [11, 12]},
            {"timestamp": 9, "input_length": 10, "output_length": 1, "hash_ids": []},
            {"timestamp": 12, "input_length": 32, "output_length": 1, "hash_ids": [11, 12]},
        ],
    )
    reqs = list(read_trace(path, options=ReadOptions(block_size_tokens=16)))
    assert [_prompt(r).num_tokens for r in reqs] == [45, 45, 10, 32]
    assert [len(_prompt(r).block_hashes) for r in reqs] == [3, 3, 1, 2]
    first, second = _prompt(reqs[0]).block_hashes, _prompt(reqs[1]).block_hashes
    assert first[2] != second[2]  # unknown tails differ
    # the repeat reuses its 32 hashed tokens (not its unknown tail), the last one all 32
    assert _hit(reqs) == pytest.approx((32 + 32) / (45 + 45 + 10 + 32))
    # more than a block past the hashes is still a wrong block size
    bad = _write(tmp_path / "bad.jsonl", [{"input_length": 50, "hash_ids": [1, 2]}])
    with pytest.raises(InputError, match="cannot hold"):
        list(read_trace(bad, options=ReadOptions(block_size_tokens=16)))


def test_bailian_trace(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "bl.jsonl",
        [
            {
                "chat_id": 159,
                "parent_chat_id": -1,
                "timestamp": 61.114,
                "input_length": 40,
                "output_length": 13,
                "type": "text",
                "turn": 1,
                "hash_ids": [1, 2, 3],
            },
            {
                "chat_id": 160,
                "parent_chat_id": -1,
                "timestamp": 61.5,
                "input_length": 16,
                "output_length": 2,
                "type": "search",
                "turn": 1,
                "hash_ids": [9],
            },
            {
                "chat_id": 171,
                "parent_chat_id": 159,
                "timestamp": 70.0,
                "input_length": 64,
                "output_length": 5,
                "type": "text",
                "turn": 2,
                "hash_ids": [1, 2, 4, 5],
            },
            {
                "chat_id": 180,
                "parent_chat_id": 171,
                "timestamp": 80.25,
                "input_length": 80,
                "output_length": 5,
                "type": "text",
                "turn": 3,
                "hash_ids": [1, 2, 4, 5, 6],
            },
        ],
    )
    assert detect_format(path) == "bailian"
    reqs = list(read_trace(path))
    assert [r.session_id for r in reqs] == ["159", "160", "159", "159"]
    assert [r.arrival_s for r in reqs] == [61.114, 61.5, 70.0, 80.25]  # seconds
    assert [r.model for r in reqs] == ["text", "search", "text", "text"]
    assert [r.attrs.turn_index for r in reqs] == [1, 1, 2, 3]
    assert all(_prompt(r).block_size_tokens == 16 for r in reqs)
    res = analyze_requests(reqs, trace_path="t", trace_format="bailian", tokenizer_name=None)
    assert res.sessions.num_sessions == 2 and res.sessions.num_followup_turns == 2
    assert res.overlap.reusable_tokens == 32 + 64


def test_bailian_bad_parent(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "bl.jsonl",
        [{"chat_id": 1, "parent_chat_id": [2], "input_length": 4, "hash_ids": [1], "turn": 1}],
    )
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    assert (err.value.line, err.value.field) == (1, "parent_chat_id")
