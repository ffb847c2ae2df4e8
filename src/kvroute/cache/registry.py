"""The registered prefix-cache models, each bound to its engine settings.

``cache_models()`` builds a fresh registry (nothing is registered at import). A factory
takes the :class:`~kvroute.cache.base.CacheGeometry` (pool size, trace block size) and
returns a new, empty :class:`~kvroute.cache.base.PrefixCache`; a plugin model registers
the same way, with its settings bound in its factory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvroute.cache.base import CacheGeometry, PrefixCache
from kvroute.cache.models.llamacpp import LlamaCppConfig, LlamaCppPrefixCache
from kvroute.cache.models.sglang import SglangConfig, SglangPrefixCache
from kvroute.cache.models.vllm import VllmConfig, VllmPrefixCache
from kvroute.registry import Registry

CacheFactory = Callable[[CacheGeometry], PrefixCache]


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Per-engine settings of the built-in models (each defaults to the engine's own)."""

    vllm: VllmConfig = field(default_factory=VllmConfig)
    sglang: SglangConfig = field(default_factory=SglangConfig)
    llamacpp: LlamaCppConfig = field(default_factory=LlamaCppConfig)


def cache_models(settings: EngineSettings | None = None) -> Registry[CacheFactory]:
    """The prefix-cache models by name: ``llamacpp``, ``vllm``, ``sglang``."""
    s = settings or EngineSettings()
    reg: Registry[CacheFactory] = Registry("engine cache model")

    def llamacpp(geometry: CacheGeometry) -> PrefixCache:
        return LlamaCppPrefixCache(s.llamacpp, geometry)

    def vllm(geometry: CacheGeometry) -> PrefixCache:
        return VllmPrefixCache(s.vllm, geometry)

    def sglang(geometry: CacheGeometry) -> PrefixCache:
        return SglangPrefixCache(s.sglang, geometry)

    reg.add("llamacpp", llamacpp)
    reg.add("vllm", vllm)
    reg.add("sglang", sglang)
    return reg
