"""Engine adapters by name. A fresh registry per call: no module-level state."""

from __future__ import annotations

from typing import Protocol

import httpx

from kvroute.engines.base import EngineAdapter
from kvroute.engines.llamacpp import LlamaCppAdapter
from kvroute.engines.sglang import SglangAdapter
from kvroute.engines.vllm import VllmAdapter
from kvroute.registry import Registry


class AdapterFactory(Protocol):
    """Builds an adapter for the server at ``base_url`` (an adapter class is one)."""

    def __call__(self, base_url: str, *, client: httpx.AsyncClient) -> EngineAdapter: ...


def adapter_registry() -> Registry[AdapterFactory]:
    """``llamacpp``, ``vllm`` and ``sglang`` (the last untested on a real server)."""
    registry: Registry[AdapterFactory] = Registry("engine")
    registry.add("llamacpp", LlamaCppAdapter)
    registry.add("vllm", VllmAdapter)
    registry.add("sglang", SglangAdapter)
    return registry


def make_adapter(engine: str, base_url: str, *, client: httpx.AsyncClient) -> EngineAdapter:
    """The adapter for ``engine`` at ``base_url``; an unknown name lists the valid ones."""
    return adapter_registry().get(engine)(base_url, client=client)
