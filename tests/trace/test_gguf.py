"""GGUF metadata reader: a hand-packed tiny file, its failure modes, and the real model."""

from __future__ import annotations

import struct
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kvroute.errors import TokenizerError
from kvroute.trace.gguf import (
    GGUFValueType,
    encode_gguf_metadata,
    parse_gguf_metadata,
    read_gguf_metadata,
)
from kvroute.trace.tokenizer import default_model_path

T = GGUFValueType


# Packed by hand with struct, independently of the module's own writer.
def _str(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, vtype: GGUFValueType, payload: bytes) -> bytes:
    return _str(key) + struct.pack("<I", vtype) + payload


def _array(elem_type: GGUFValueType, count: int, payload: bytes) -> bytes:
    return struct.pack("<IQ", elem_type, count) + payload


TINY_KVS = [
    _kv("general.architecture", T.STRING, _str("llama")),
    _kv("t.u8", T.UINT8, struct.pack("<B", 250)),
    _kv("t.i8", T.INT8, struct.pack("<b", -5)),
    _kv("t.u16", T.UINT16, struct.pack("<H", 65000)),
    _kv("t.i16", T.INT16, struct.pack("<h", -300)),
    _kv("t.u32", T.UINT32, struct.pack("<I", 4_000_000_000)),
    _kv("t.i32", T.INT32, struct.pack("<i", -7)),
    _kv("t.f32", T.FLOAT32, struct.pack("<f", 0.5)),
    _kv("t.bool", T.BOOL, struct.pack("<?", True)),
    _kv("t.u64", T.UINT64, struct.pack("<Q", 2**63 + 1)),
    _kv("t.i64", T.INT64, struct.pack("<q", -(2**40))),
    _kv("t.f64", T.FLOAT64, struct.pack("<d", 1e-9)),
    _kv("t.unicode", T.STRING, _str("héllo 🙂")),
    _kv("t.strs", T.ARRAY, _array(T.STRING, 3, _str("<|im_start|>") + _str("Ġ t") + _str(""))),
    _kv("t.i32s", T.ARRAY, _array(T.INT32, 3, struct.pack("<3i", 1, -2, 3))),
    _kv("t.bools", T.ARRAY, _array(T.BOOL, 2, struct.pack("<2?", False, True))),
    _kv("t.empty", T.ARRAY, _array(T.FLOAT32, 0, b"")),
    _kv(
        "t.nested",
        T.ARRAY,
        _array(
            T.ARRAY,
            2,
            _array(T.UINT8, 2, bytes([1, 2])) + _array(T.STRING, 1, _str("x")),
        ),
    ),
]

TINY_VALUES = {
    "general.architecture": "llama",
    "t.u8": 250,
    "t.i8": -5,
    "t.u16": 65000,
    "t.i16": -300,
    "t.u32": 4_000_000_000,
    "t.i32": -7,
    "t.f32": 0.5,
    "t.bool": True,
    "t.u64": 2**63 + 1,
    "t.i64": -(2**40),
    "t.f64": 1e-9,
    "t.unicode": "héllo 🙂",
    "t.strs": ["<|im_start|>", "Ġ t", ""],
    "t.i32s": [1, -2, 3],
    "t.bools": [False, True],
    "t.empty": [],
    "t.nested": [[1, 2], ["x"]],
}


def tiny_gguf(version: int = 3, kvs: list[bytes] = TINY_KVS, num_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, num_tensors, len(kvs)) + b"".join(kvs)


def write(tmp_path: Path, data: bytes, name: str = "tiny.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("version", [2, 3])
def test_reads_every_value_type(tmp_path: Path, version: int) -> None:
    meta = read_gguf_metadata(write(tmp_path, tiny_gguf(version, num_tensors=7)))
    assert meta.version == version
    assert meta.num_tensors == 7
    assert dict(meta.fields) == TINY_VALUES
    assert list(meta.fields) == list(TINY_VALUES)  # file order kept
    assert meta.field_types["t.strs"] == T.ARRAY
    assert meta.array_types["t.strs"] == T.STRING
    assert meta.array_types["t.nested"] == T.ARRAY
    assert all(type(v) is bool for v in meta.fields["t.bools"])  # type: ignore[union-attr]


def test_typed_getters(tmp_path: Path) -> None:
    meta = read_gguf_metadata(write(tmp_path, tiny_gguf()))
    assert meta.get_str("general.architecture") == "llama"
    assert meta.get_int("t.u32") == 4_000_000_000
    assert meta.get_bool("t.bool") is True
    assert meta.get_str_list("t.strs") == ["<|im_start|>", "Ġ t", ""]
    assert meta.get_int_list("t.i32s") == [1, -2, 3]
    assert meta.get_str("missing", "fallback") == "fallback"
    assert "t.u8" in meta
    assert "missing" not in meta
    with pytest.raises(TokenizerError, match="no key 'missing'"):
        meta.get_str("missing")
    with pytest.raises(TokenizerError, match=r"'t\.u32' is UINT32, expected string"):
        meta.get_str("t.u32")
    with pytest.raises(TokenizerError, match=r"'t\.i32s' is not an array of STRING"):
        meta.get_str_list("t.i32s")


def test_bad_magic(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"not a GGUF file \(starts with b'GGML'"):
        read_gguf_metadata(write(tmp_path, b"GGML" + tiny_gguf()[4:]))


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="not a GGUF file"):
        read_gguf_metadata(write(tmp_path, b""))
    with pytest.raises(TokenizerError, match="cannot read GGUF file"):
        read_gguf_metadata(tmp_path / "absent.gguf")


def test_every_truncation_is_reported(tmp_path: Path) -> None:
    data = tiny_gguf()
    for cut in range(len(data)):
        with pytest.raises(TokenizerError, match=r"truncated GGUF file|not a GGUF file"):
            parse_gguf_metadata(data[:cut], source="cut")
    path = write(tmp_path, data[: len(data) - 3])
    with pytest.raises(TokenizerError, match=rf"{path}: truncated GGUF file"):
        read_gguf_metadata(path)


def test_absurd_lengths_are_truncation_not_memory_errors() -> None:
    kv = _str("k") + struct.pack("<I", T.ARRAY) + struct.pack("<IQ", T.INT64, 2**60)
    with pytest.raises(TokenizerError, match="truncated"):
        parse_gguf_metadata(tiny_gguf(kvs=[kv]))


def test_unsupported_versions_and_byte_order() -> None:
    with pytest.raises(TokenizerError, match="version 1 is not supported"):
        parse_gguf_metadata(tiny_gguf(version=1))
    big_endian = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    with pytest.raises(TokenizerError, match="big-endian"):
        parse_gguf_metadata(big_endian)


def test_unknown_value_type() -> None:
    kv = _str("k") + struct.pack("<I", 99)
    with pytest.raises(TokenizerError, match="unknown GGUF value type 99"):
        parse_gguf_metadata(tiny_gguf(kvs=[kv]), source="x.gguf")


def test_writer_round_trips_the_tiny_file(tmp_path: Path) -> None:
    meta = read_gguf_metadata(write(tmp_path, tiny_gguf()))
    flat = {k: v for k, v in meta.fields.items() if k != "t.nested"}
    meta = replace(meta, fields=flat)
    again = parse_gguf_metadata(encode_gguf_metadata(meta))
    assert dict(again.fields) == flat
    assert dict(again.field_types) == {k: meta.field_types[k] for k in flat}
    assert again.num_tensors == 0


def test_real_model_metadata_is_read_quickly() -> None:
    path = default_model_path()
    assert path.is_file(), f"{path} missing: run scripts/install-engines model"
    best_s = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        meta = read_gguf_metadata(path)
        best_s = min(best_s, time.perf_counter() - start)
    assert best_s < 0.5, f"reading metadata took {best_s:.3f} s"
    assert meta.version == 3
    assert meta.num_tensors > 0
    assert meta.get_str("general.architecture") == "llama"
    assert meta.get_str("tokenizer.ggml.model") == "gpt2"
    assert meta.get_str("tokenizer.ggml.pre") == "smollm"
    tokens = meta.get_str_list("tokenizer.ggml.tokens")
    assert len(tokens) == 49152
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert len(meta.get_str_list("tokenizer.ggml.merges")) == 48900
    assert meta.get_int_list("tokenizer.ggml.token_type")[:3] == [3, 3, 3]
    assert meta.get_bool("tokenizer.ggml.add_bos_token") is False
    assert "<|im_start|>" in meta.get_str("tokenizer.chat_template")


def test_writer_round_trips_the_real_vocab() -> None:
    meta = read_gguf_metadata(default_model_path())
    again = parse_gguf_metadata(encode_gguf_metadata(meta))
    assert dict(again.fields) == dict(meta.fields)
