"""Adapters by name."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from kvroute.engines.llamacpp import LlamaCppAdapter
from kvroute.engines.registry import adapter_registry, make_adapter
from kvroute.engines.sglang import SglangAdapter
from kvroute.engines.vllm import VllmAdapter
from kvroute.errors import UsageError


def test_every_engine_has_an_adapter_named_after_it() -> None:
    async def build() -> None:
        async with httpx.AsyncClient() as client:
            for name, cls in [
                ("llamacpp", LlamaCppAdapter),
                ("vllm", VllmAdapter),
                ("sglang", SglangAdapter),
            ]:
                adapter = make_adapter(name, "http://127.0.0.1:1/", client=client)
                assert isinstance(adapter, cls)
                assert adapter.engine == name
                assert adapter.base_url == "http://127.0.0.1:1"

    asyncio.run(build())
    assert sorted(adapter_registry().names()) == ["llamacpp", "sglang", "vllm"]


def test_unknown_engine_lists_the_valid_names() -> None:
    with pytest.raises(UsageError, match="valid: llamacpp, sglang, vllm"):
        adapter_registry().get("tgi")
