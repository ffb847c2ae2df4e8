"""Adapter for llama.cpp's ``llama-server`` (``tools/server`` in ggml-org/llama.cpp).

What the server must be started with for each reading (``local.py`` does this):

- ``--metrics``: ``/metrics`` (load, server-wide cache counters);
- ``--slots`` (the default in current builds): ``/slots``;
- ``--slot-save-path DIR``: ``POST /slots/{id}?action=erase``, the cache reset.
  Without it the server answers 501 and :meth:`reset_cache` says a restart is needed.
  Note that a build with a host-memory prompt cache (``--cache-ram``, on by default
  since late 2025) can bring an erased prompt back from RAM; ``local.py`` starts
  servers with ``--cache-ram 0`` so a slot is the only cache, as kvroute's slot model
  assumes.

Counter semantics differ across builds, which is why the reading is a pure function
of the scrape (:func:`cache_counters_from_metrics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvroute.engines.base import (
    CacheCounters,
    CacheResetOutcome,
    KvCapacity,
    Load,
    ResponseCacheUsage,
    SlotView,
    UsageSource,
)
from kvroute.engines.http import (
    EngineHTTPError,
    HttpEngine,
    as_list,
    as_mapping,
    counter_value,
    get_json,
    get_metrics,
    int_field,
    openai_usage,
    optional_int_field,
    request,
)
from kvroute.engines.metrics_text import Metrics
from kvroute.errors import EngineError
from kvroute.types import JSONValue

PROMPT_TOTAL = "llamacpp:prompt_tokens_total"
PROMPT_CACHED_TOTAL = "llamacpp:prompt_tokens_cached_total"
REQUESTS_PROCESSING = "llamacpp:requests_processing"
REQUESTS_DEFERRED = "llamacpp:requests_deferred"

METRICS_HINT = "start llama-server with --metrics"


class LlamaCppAdapter(HttpEngine):
    """One llama-server at ``base_url``, reached through ``client``."""

    ENGINE = "llamacpp"
    LOADING_ON_503 = True  # /health answers 503 while the model loads

    async def load(self) -> Load:
        metrics = await self._metrics()
        running = counter_value(metrics, REQUESTS_PROCESSING)
        waiting = counter_value(metrics, REQUESTS_DEFERRED)
        if running is None or waiting is None:
            raise EngineError(f"{self._base_url}/metrics has no request gauges", hint=METRICS_HINT)
        return Load(num_running=running, num_waiting=waiting)

    async def kv_capacity(self) -> KvCapacity:
        """``/props``: ``total_slots`` slots of ``default_generation_settings.n_ctx`` each
        (``-c`` is split evenly across ``--parallel`` slots)."""
        url = f"{self._base_url}/props"
        props = as_mapping(await get_json(self._client, url), url)
        num_slots = int_field(props, "total_slots", url)
        settings = as_mapping(props.get("default_generation_settings"), f"{url} settings")
        slot_len = int_field(settings, "n_ctx", f"{url} default_generation_settings")
        return KvCapacity(
            block_size_tokens=1,
            num_blocks=num_slots * slot_len,
            num_slots=num_slots,
            slot_len_tokens=slot_len,
        )

    async def cache_counters(self) -> CacheCounters:
        return cache_counters_from_metrics(await self._metrics())

    def response_cache_usage(self, body: Mapping[str, JSONValue]) -> ResponseCacheUsage | None:
        return response_cache_usage(body)

    async def slots(self) -> list[SlotView]:
        url = f"{self._base_url}/slots"
        return slots_from_json(await get_json(self._client, url))

    async def reset_cache(self) -> CacheResetOutcome:
        """Erase every slot (``POST /slots/{id}?action=erase``).

        An erase of a busy slot is deferred by the server until the slot is free, and
        the answer comes only then, so when this returns every slot is empty.
        """
        for slot in await self.slots():
            url = f"{self._base_url}/slots/{slot.slot_id}?action=erase"
            try:
                await request(self._client, "POST", url, json_body={}, timeout_s=120.0)
            except EngineHTTPError as exc:
                if exc.status_code == 501:  # started without --slot-save-path
                    return CacheResetOutcome.NEEDS_RESTART
                raise
        return CacheResetOutcome.RESET

    async def _metrics(self) -> Metrics:
        try:
            return await get_metrics(self._client, self._base_url)
        except EngineHTTPError as exc:
            if exc.status_code == 501:
                raise EngineError(
                    f"{self._base_url} serves no /metrics", hint=METRICS_HINT
                ) from None
            raise


def cache_counters_from_metrics(metrics: Metrics) -> CacheCounters:
    """Turn a llama-server scrape into :class:`CacheCounters`.

    ``prompt_tokens_total`` has always counted the tokens the server *computed*
    (current builds say so in its HELP: "excluding cached tokens"); builds since
    mid-2025 add ``prompt_tokens_cached_total``. So the prompt total is the sum of the
    two, unless a build's HELP says its total already includes cached tokens. Builds
    without the cached counter give neither number (computed tokens alone say nothing
    about the cache).
    """
    computed = counter_value(metrics, PROMPT_TOTAL)
    if computed is None:
        raise EngineError(f"scrape has no {PROMPT_TOTAL}", hint=METRICS_HINT)
    cached = counter_value(metrics, PROMPT_CACHED_TOTAL)
    if cached is None:
        return CacheCounters(prompt_tokens=None, cached_tokens=None)
    help_text = (metrics.help(PROMPT_TOTAL) or "").lower()
    includes_cached = "includ" in help_text and "exclud" not in help_text
    prompt = computed if includes_cached else computed + cached
    return CacheCounters(prompt_tokens=prompt, cached_tokens=cached)


def response_cache_usage(body: Mapping[str, Any]) -> ResponseCacheUsage | None:
    """Prefer llama.cpp's own ``timings`` (``cache_n`` cached + ``prompt_n`` computed);
    fall back to the OpenAI ``usage`` block, which current builds also fill."""
    timings = body.get("timings")
    if isinstance(timings, Mapping) and "cache_n" in timings and "prompt_n" in timings:
        cached = int_field(timings, "cache_n", "response timings")
        computed = int_field(timings, "prompt_n", "response timings")
        return ResponseCacheUsage(
            prompt_tokens=cached + computed,
            cached_tokens=cached,
            source=UsageSource.LLAMACPP_TIMINGS,
        )
    usage = openai_usage(body)
    if usage is None:
        return None
    return ResponseCacheUsage(
        prompt_tokens=usage[0], cached_tokens=usage[1], source=UsageSource.OPENAI_USAGE
    )


def slots_from_json(body: JSONValue) -> list[SlotView]:
    """Parse ``GET /slots``. ``n_prompt_tokens`` is the size of the slot's token cache
    (prompt and generated tokens); the per-task counters beside it are reset when the
    task ends, so they are not read."""
    views: list[SlotView] = []
    for item in as_list(body, "/slots"):
        slot = as_mapping(item, "/slots[]")
        where = f"/slots[{slot.get('id')}]"
        views.append(
            SlotView(
                slot_id=int_field(slot, "id", where),
                slot_len_tokens=int_field(slot, "n_ctx", where),
                is_processing=bool(slot.get("is_processing", False)),
                num_tokens_held=optional_int_field(slot, "n_prompt_tokens", where),
            )
        )
    return views
