"""The model registry: names, errors listing valid names, settings bound per engine."""

from __future__ import annotations

import pytest

from kvroute.cache.base import CacheGeometry, PrefixCache
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.errors import UsageError


def test_names_and_unknown() -> None:
    reg = cache_models()
    assert reg.names() == ["llamacpp", "vllm", "sglang"]
    with pytest.raises(UsageError, match="valid: llamacpp, sglang, vllm"):
        reg.get("trtllm")


def test_settings_and_geometry_reach_the_model() -> None:
    model: PrefixCache = cache_models(EngineSettings(vllm=VllmConfig(block_size_tokens=32))).get(
        "vllm"
    )(CacheGeometry(32 * 11))
    assert model.unit_tokens == 32 and model.capacity_tokens == 320
    hashed = cache_models().get("sglang")(CacheGeometry(None, block_size_tokens=512))
    assert hashed.unit_tokens == 512 and hashed.capacity_tokens is None
