"""Keyed hashes of exported traces: same key equal, different key different, the
header names the key and is checked on reading."""

from __future__ import annotations

import json
from itertools import pairwise
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


def test_the_keyed_function_is_blake2b_of_each_hash_in_c_and_python() -> None:
    """The scheme exports and captures share (``kvroute-keyed-v1``): traces keyed by
    another build or release with one key compare."""
    import hashlib
    import random

    from kvroute.trace.hashing import keyed_values, python_keyed_values

    rng = random.Random(7)
    for key in (KEY_A, rng.randbytes(16), rng.randbytes(64)):
        values = [0, 1, (1 << 64) - 1, *(rng.getrandbits(64) for _ in range(100))]
        expected = [
            int.from_bytes(
                hashlib.blake2b(v.to_bytes(8, "little"), digest_size=8, key=key).digest(),
                "little",
            )
            for v in values
        ]
        assert keyed_values(values, key) == expected  # in C when chainhash.c is built
        assert python_keyed_values(values, key) == expected
        assert keyed_hashes(np.array(values, dtype=np.uint64), key).tolist() == expected


def test_a_guessed_prompt_cannot_be_tested_without_the_key() -> None:
    """The unkeyed chain is linear (``h[i] = h[i-1] * P + content(block i)``), so a
    secret seed alone would leak each block's content hash as ``h[i] - h[i-1] * P``,
    which anyone can compute for a guessed block. Keyed hashes must not: for a keyed
    seed this test fails."""
    from kvroute.trace.hashing import block_contents, chain_hashes

    p = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    tokens = np.arange(64, dtype=np.uint32) * 7919 % 50_000
    guessed = block_contents(tokens, 16).tolist()
    secret_seed = chain_hashes(tokens, 16, seed=0x1234_5678_9ABC_DEF0).tolist()
    leaked = [(h - prev * p) & mask for prev, h in pairwise(secret_seed)]
    assert leaked == guessed[1:]  # why a keyed seed is not enough
    keyed = keyed_hashes(chain_hashes(tokens, 16), KEY_A).tolist()
    differences = [(h - prev * p) & mask for prev, h in pairwise(keyed)]
    assert not set(differences) & set(guessed)
