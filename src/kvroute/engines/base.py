"""What kvroute reads from an inference engine, and the one interface every adapter has.

An adapter knows one engine's quirks (endpoints, metric names, response fields) and
turns them into the records below. Adapters are asyncio (the gateway and the bench
client are), take their ``httpx.AsyncClient`` from the caller (the seam tests and the
gateway use), and never own a process: starting and stopping engines is ``local.py``.

Cache counters are read three ways, because engines disagree on where the truth is:

=================  ========================================  ===========================
reading            where                                     granularity
=================  ========================================  ===========================
per response       ``timings.cache_n`` / ``usage.prompt_     one request
                   tokens_details.cached_tokens``
per server         ``/metrics`` counters, as deltas          everything since the last
                   (:meth:`CacheCounters.since`)             scrape, all requests
slot view          ``/slots`` (llama.cpp only)               what each slot holds now
=================  ========================================  ===========================
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kvroute.errors import EngineError
from kvroute.types import JSONValue


class HealthState(enum.Enum):
    """How an engine answered its health probe."""

    READY = "ready"
    """It answers and can serve its model."""
    LOADING = "loading"
    """It answers but says the model is not ready yet (llama.cpp's 503 while loading)."""
    UNHEALTHY = "unhealthy"
    """It answers with an error."""
    UNREACHABLE = "unreachable"
    """Nothing answers: stopped, crashed, not yet listening, or a wrong address."""


@dataclass(frozen=True, slots=True)
class Health:
    """One health probe's outcome; ``detail`` is a short human-readable reason."""

    state: HealthState
    detail: str = ""

    @property
    def is_ready(self) -> bool:
        return self.state is HealthState.READY


@dataclass(frozen=True, slots=True)
class Load:
    """Requests in flight now: being computed, and queued for a slot or batch place."""

    num_running: int
    num_waiting: int


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """How many tokens of KV cache the engine has, in its own allocation unit.

    vLLM allocates ``num_blocks`` blocks of ``block_size_tokens``; SGLang pages of
    ``page_size`` tokens; llama.cpp gives each of ``num_slots`` slots a fixed context
    of ``slot_len_tokens`` (reported here as blocks of one token, so ``total_tokens``
    means the same thing for every engine).
    """

    block_size_tokens: int
    num_blocks: int
    num_slots: int | None = None
    slot_len_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.block_size_tokens * self.num_blocks


@dataclass(frozen=True, slots=True)
class CacheCounters:
    """A server's cumulative prompt-token counters since it started.

    ``prompt_tokens`` counts every prompt token the server was asked to prefill, cached
    or not; ``cached_tokens`` the ones it took from its prefix cache. Either is None
    when the engine build does not export enough to know it (an old llama.cpp without
    ``prompt_tokens_cached_total``). Counters are cumulative: compare two readings with
    :meth:`since`.
    """

    prompt_tokens: int | None
    cached_tokens: int | None

    def since(self, earlier: CacheCounters) -> CacheCounters:
        """The counts between ``earlier`` and this reading.

        Raises :class:`EngineError` when a counter went down: the server restarted in
        between, so the difference means nothing.
        """
        return CacheCounters(
            prompt_tokens=_delta("prompt tokens", earlier.prompt_tokens, self.prompt_tokens),
            cached_tokens=_delta("cached tokens", earlier.cached_tokens, self.cached_tokens),
        )

    @property
    def hit_rate(self) -> float | None:
        """cached / prompt tokens; None when either is unknown or nothing was prompted."""
        if self.prompt_tokens is None or self.cached_tokens is None or self.prompt_tokens == 0:
            return None
        return self.cached_tokens / self.prompt_tokens


def _delta(what: str, before: int | None, after: int | None) -> int | None:
    if before is None or after is None:
        return None
    if after < before:
        raise EngineError(
            f"{what} counter went down ({before} -> {after})",
            hint="the engine restarted between the two readings; take a new baseline",
        )
    return after - before


class UsageSource(enum.Enum):
    """Which field of a response the per-request cache reading came from."""

    LLAMACPP_TIMINGS = "timings"
    """llama.cpp's ``timings``: ``cache_n`` cached, ``prompt_n`` computed."""
    OPENAI_USAGE = "usage"
    """OpenAI's ``usage.prompt_tokens`` and ``prompt_tokens_details.cached_tokens``."""
    SGLANG_META_INFO = "meta_info"
    """SGLang's native ``/generate`` ``meta_info``: ``prompt_tokens``, ``cached_tokens``."""


@dataclass(frozen=True, slots=True)
class ResponseCacheUsage:
    """Prompt tokens of one request, and how many of them came from the prefix cache."""

    prompt_tokens: int
    cached_tokens: int
    source: UsageSource

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True, slots=True)
class SlotView:
    """One llama.cpp slot: its context size and the tokens it keeps for reuse.

    ``num_tokens_held`` is the last prompt plus what was generated for it, the prefix
    the slot's next request can reuse; None for a slot that has served nothing yet,
    0 right after an erase.
    """

    slot_id: int
    slot_len_tokens: int
    is_processing: bool
    num_tokens_held: int | None


class CacheResetOutcome(enum.Enum):
    """What :meth:`EngineAdapter.reset_cache` achieved."""

    RESET = "reset"
    """The engine dropped its reusable prefix cache; the next request starts cold."""
    NEEDS_RESTART = "needs-restart"
    """The engine offers no reset here; restart the process to start cold."""


class EngineAdapter(Protocol):
    """One running engine seen through its HTTP API. All network methods are async.

    Methods raise :class:`EngineError` when the engine cannot be reached or answers
    something the adapter cannot read, except :meth:`health`, which turns every
    failure into a :class:`Health` value (that is its job).
    """

    @property
    def engine(self) -> str:
        """The registry name of this engine: ``llamacpp``, ``vllm`` or ``sglang``."""
        ...

    @property
    def base_url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:8080`` (no trailing slash)."""
        ...

    async def health(self) -> Health:
        """Probe liveness and readiness. Never raises for a network error."""
        ...

    async def models(self) -> list[str]:
        """The model names the server accepts in ``"model"`` (``/v1/models``)."""
        ...

    async def load(self) -> Load:
        """Requests running and waiting now."""
        ...

    async def kv_capacity(self) -> KvCapacity | None:
        """The KV cache size, or None when this engine does not report it."""
        ...

    async def cache_counters(self) -> CacheCounters:
        """The server-wide cumulative prompt/cached token counters (``/metrics``)."""
        ...

    def response_cache_usage(self, body: Mapping[str, JSONValue]) -> ResponseCacheUsage | None:
        """Read one decoded completion response (or final stream chunk); pure.

        None when the body carries no cache reading (the engine was started without
        the flag that adds it, or a stream chunk before the last).
        """
        ...

    async def slots(self) -> list[SlotView] | None:
        """Each slot's state; None for engines that have no slots (vLLM, SGLang)."""
        ...

    async def reset_cache(self) -> CacheResetOutcome:
        """Drop the reusable prefix cache so a benchmark can start cold.

        Mutates the engine. Waits until the engine confirms; returns
        :attr:`CacheResetOutcome.NEEDS_RESTART` where only a restart would do it.
        """
        ...
