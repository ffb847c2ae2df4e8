"""Keyed hashes of exported traces: same key equal, different key different, the
header names the key and is checked on reading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvroute.errors import InputError
from kvroute.trace.hashing import KEYED_HASH_SCHEME, key_id, keyed_hashes
from kvroute.trace.readers import read_trace
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt
from kvroute.trace.writer import Layout, TraceWriter, prompt_block_hashes

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


def _requests() -> list[Request]:
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 40_000, size=48, dtype=np.uint32)
    return [
        Request(
            prompt=TokenPrompt(
                np.concatenate([shared, rng.integers(0, 40_000, size=n, dtype=np.uint32)])
            ),
            arrival_s=float(i),
            output_len=5,
        )
        for i, n in enumerate((10, 20, 16))
    ]


def _write(path: Path, key: bytes | None, layout: Layout = Layout.KVROUTE) -> list[list[int]]:
    with TraceWriter(path, key=key, layout=layout) as w:
        for r in _requests():
            w.append(r)
    return [
        r.prompt.block_hashes.tolist()
        for r in read_trace(path)
        if isinstance(r.prompt, BlockPrompt)
    ]


def test_same_key_equal_different_key_different(tmp_path: Path) -> None:
    a1 = _write(tmp_path / "a1.jsonl", KEY_A)
    a2 = _write(tmp_path / "a2.jsonl", KEY_A)
    b = _write(tmp_path / "b.jsonl", KEY_B)
    plain = _write(tmp_path / "plain.jsonl", None)
    assert a1 == a2
    assert all(x != y for ra, rb in zip(a1, b, strict=True) for x, y in zip(ra, rb, strict=True))
    assert all(
        x != y for ra, rp in zip(a1, plain, strict=True) for x, y in zip(ra, rp, strict=True)
    )
    # the prefix structure survives keying: the shared 48 tokens are 3 equal blocks
    assert a1[0][:3] == a1[1][:3] == a1[2][:3] and a1[0][3] != a1[1][3]


def test_keyed_hashes_are_a_function_of_the_unkeyed_chain() -> None:
    ids = _requests()[0].prompt
    assert isinstance(ids, TokenPrompt)
    chain = prompt_block_hashes(ids.token_ids, 16)
    assert keyed_hashes(chain, KEY_A).tolist() == keyed_hashes(chain.copy(), KEY_A).tolist()
    with pytest.raises(ValueError, match="16 bytes"):
        keyed_hashes(chain, b"short")


def test_header_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    _write(path, KEY_A)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["hash_scheme"] == KEYED_HASH_SCHEME
    assert header["key_id"] == key_id(KEY_A) != key_id(KEY_B)
    assert len(header["key_id"]) == 16


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({"kvroute_trace": 1, "hash_scheme": "kvroute-keyed-v1"}, "key_id"),
        ({"kvroute_trace": 1, "hash_scheme": "kvroute-keyed-v1", "key_id": "xyz"}, "key_id"),
        ({"kvroute_trace": 1, "hash_scheme": "md5-of-text"}, "hash_scheme"),
    ],
)
def test_header_is_checked(tmp_path: Path, header: dict[str, object], field: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps({"input_len": 4, "hashes": [1]}) + "\n")
    with pytest.raises(InputError) as err:
        list(read_trace(path, skip_invalid=True))
    assert err.value.field == field and err.value.line == 1


def test_mooncake_layout_reads_back_with_its_block_size(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    hashes = _write(path, KEY_A, Layout.MOONCAKE)
    first = json.loads(path.read_text().splitlines()[0])
    assert first["key_id"] == key_id(KEY_A) and first["block_size"] == 16
    assert first["timestamp"] == 0.0 and first["input_length"] == 58
    assert hashes == _write(tmp_path / "k.jsonl", KEY_A)
