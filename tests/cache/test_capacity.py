"""KV capacity from model shapes and GPUs, or given directly."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from kvroute.cache.capacity import (
    GIB,
    CapacitySource,
    capacity_from_blocks,
    capacity_from_hardware,
    capacity_from_tokens,
    load_presets,
    model_from_gguf,
    parse_size,
    resolve_gpu,
    resolve_model,
)
from kvroute.errors import UsageError
from kvroute.trace.gguf import GGUFMetadata, GGUFValueType, encode_gguf_metadata


def test_presets_load_and_have_known_kv_sizes() -> None:
    p = load_presets()
    assert p.models["llama-3.1-8b"].kv_bytes_per_token() == 32 * 8 * 2 * 128 * 2  # 128 KiB
    assert p.models["llama-3.1-8b"].kv_bytes_per_token("fp8") == 65536
    assert p.models["qwen2.5-7b"].kv_bytes_per_token() == 28 * 4 * 2 * 128 * 2
    assert p.gpus["h100-80gb"].memory_bytes == 81559 * 2**20


def test_hardware_capacity_formula() -> None:
    p = load_presets()
    m, g = p.models["llama-3.1-8b"], p.gpus["h100-80gb"]
    cap = capacity_from_hardware(m, g, utilization=0.9)
    pool = int(g.memory_bytes * 0.9) - m.weight_bytes - 2 * GIB  # type: ignore[operator]
    assert cap.tokens == pool // 131072 and cap.source is CapacitySource.HARDWARE
    assert 400_000 < cap.tokens < 500_000  # vLLM reports ~450k tokens for this setup
    two = capacity_from_hardware(m, g, num_gpus=2)
    assert two.tokens is not None and two.tokens > 2 * cap.tokens
    with pytest.raises(UsageError, match="leaves no KV memory"):
        capacity_from_hardware(p.models["llama-3.1-70b"], g)


def test_direct_capacities() -> None:
    assert capacity_from_tokens(None).source is CapacitySource.UNBOUNDED
    c = capacity_from_blocks(1000, 16, model=load_presets().models["smollm2-135m"])
    assert c.tokens == 16000 and c.kv_bytes_per_token == 30 * 3 * 2 * 64 * 2
    with pytest.raises(UsageError):
        capacity_from_tokens(0)


def test_parse_size_and_resolve_errors() -> None:
    assert parse_size("64k") == 64_000 and parse_size("1.5M") == 1_500_000
    assert parse_size("80GiB") == 80 * 2**30 and parse_size("24GB") == 24 * 10**9
    assert parse_size("1000") == 1000
    with pytest.raises(UsageError):
        parse_size("lots")
    assert resolve_gpu("48GiB").memory_bytes == 48 * 2**30
    with pytest.raises(UsageError, match="valid: a100-40gb"):
        resolve_gpu("tpu")
    with pytest.raises(UsageError, match="valid presets"):
        resolve_model("gpt-5")


def test_hf_config(tmp_path: Path) -> None:
    cfg = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "_name_or_path": "tiny",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = resolve_model(str(tmp_path))
    assert m.kv_bytes_per_token() == 4 * 2 * 2 * 64 * 2 and m.weights_estimated
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1234)
    assert resolve_model(str(tmp_path / "config.json")).weight_bytes == 1234
    mla = dict(cfg, kv_lora_rank=512, qk_rope_head_dim=64)
    (tmp_path / "config.json").write_text(json.dumps(mla))
    assert resolve_model(str(tmp_path)).kv_elements_per_token == 4 * 576


def test_gguf_metadata(tmp_path: Path) -> None:
    fields = {
        "general.architecture": "llama",
        "llama.block_count": 30,
        "llama.attention.head_count": 9,
        "llama.attention.head_count_kv": 3,
        "llama.embedding_length": 576,
    }
    types = {
        "general.architecture": GGUFValueType.STRING,
        **{k: GGUFValueType.UINT32 for k in fields if k != "general.architecture"},
    }
    meta = GGUFMetadata(
        "t", 3, 0, MappingProxyType(fields), MappingProxyType(types), MappingProxyType({})
    )
    path = tmp_path / "m.gguf"
    path.write_bytes(encode_gguf_metadata(meta))
    m = model_from_gguf(path)
    assert m.kv_bytes_per_token() == 30 * 3 * 2 * 64 * 2 and m.weight_bytes == path.stat().st_size
