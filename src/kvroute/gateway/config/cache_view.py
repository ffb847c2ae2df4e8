"""A backend's ``cache:`` section (for cache-aware routing)."""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.cache.models.llamacpp import LlamaCppConfig


@dataclass(frozen=True, slots=True)
class CacheViewConfig:
    """A backend's ``cache:`` settings (for cache-aware routing)."""

    capacity_tokens: int | None = None
    """KV pool in tokens; None: the engine's default here (DEFAULT_CAPACITY_TOKENS)."""
    slots: int | None = None
    """llama.cpp ``--parallel``; None: not given (llama-server's auto: 4 slots)."""
    kv_unified: bool | None = None
    """llama.cpp ``--kv-unified``; None: llama-server's default, on only when
    ``--parallel`` is not given (``slots`` None)."""
    cache_ram_mib: int = 8192
    """llama.cpp ``--cache-ram`` (0: off, as ``kvroute engines up`` starts it)."""
    block_size_tokens: int | None = None
    """vLLM ``--block-size``; None: vLLM's GPU default, 16 (vLLM-CPU runs 32 or 128, and
    a view at 16 then predicts hits the engine does not have)."""

    def llamacpp(self) -> LlamaCppConfig:
        """The llama.cpp slot model's settings for the engine these flags describe."""
        unified = self.slots is None if self.kv_unified is None else self.kv_unified
        return LlamaCppConfig(
            num_slots=self.slots or 4, kv_unified=unified, cache_ram_mib=self.cache_ram_mib
        )
