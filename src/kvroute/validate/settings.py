"""The cache model's settings for a real engine: what it reports (``read_setup``), over
what its command line fixes (``given_from_argv``, from a `kvroute engines up` record)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy, SglangConfig
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings
from kvroute.engines.base import EngineAdapter
from kvroute.engines.sglang import SglangAdapter
from kvroute.errors import EngineError, UsageError
from kvroute.types import JSONValue
from kvroute.validate.result import ENGINES, EngineSetup


async def read_setup(adapter: EngineAdapter, given: EngineSettings) -> EngineSetup:
    """The model settings for the engine behind ``adapter``: its reported KV geometry
    over the ``given`` settings. Raises ``EngineError`` when the engine reports none."""
    cap = await adapter.kv_capacity()
    if cap is None:
        raise EngineError(f"{adapter.base_url} does not report its KV cache size")
    engine = adapter.engine
    if engine == "vllm":
        vllm = dataclasses.replace(given.vllm, block_size_tokens=cap.block_size_tokens)
        return EngineSetup(
            engine,
            dataclasses.replace(given, vllm=vllm),
            cap.total_tokens,
            {"block_size": cap.block_size_tokens, "num_blocks": cap.num_blocks},
            {"max_num_seqs": vllm.max_num_seqs},
        )
    if engine == "llamacpp":
        if cap.num_slots is None or cap.slot_len_tokens is None:
            raise EngineError(f"{adapter.base_url} does not report its slots")
        llama = dataclasses.replace(given.llamacpp, num_slots=cap.num_slots)
        # A unified buffer gives every slot the whole pool, so /props's per-slot n_ctx is it.
        pool = cap.slot_len_tokens if llama.kv_unified else cap.num_slots * cap.slot_len_tokens
        settings = {f.name: getattr(llama, f.name) for f in dataclasses.fields(llama)}
        del settings["num_slots"]
        return EngineSetup(
            engine,
            dataclasses.replace(given, llamacpp=llama),
            pool,
            {"num_slots": cap.num_slots, "slot_ctx": cap.slot_len_tokens},
            settings,
        )
    if engine == "sglang" and isinstance(adapter, SglangAdapter):
        return await _sglang_setup(adapter, given)
    raise UsageError(f"cannot validate against {engine}", hint=f"one of {', '.join(ENGINES)}")


async def _sglang_setup(adapter: SglangAdapter, given: EngineSettings) -> EngineSetup:
    """SGLang reports every setting its model needs (``/get_server_info``): page size,
    pool size, eviction and schedule policy, the running-request limit when set."""
    info = await adapter.server_settings()
    try:
        eviction = EvictionPolicy(info.radix_eviction_policy)
        schedule = SchedulePolicy(info.schedule_policy)
    except ValueError:
        raise EngineError(
            f"{adapter.base_url} runs radix eviction {info.radix_eviction_policy!r} and "
            f"schedule policy {info.schedule_policy!r}; kvroute models eviction "
            f"{', '.join(p.value for p in EvictionPolicy)} and schedule "
            f"{', '.join(p.value for p in SchedulePolicy)}"
        ) from None
    cap = info.capacity
    sglang = SglangConfig(
        page_size=cap.block_size_tokens,
        eviction_policy=eviction,
        schedule_policy=schedule,
        max_running_requests=info.max_running_requests,
    )
    return EngineSetup(
        "sglang",
        dataclasses.replace(given, sglang=sglang),
        cap.total_tokens,
        {"page_size": cap.block_size_tokens, "max_total_num_tokens": cap.total_tokens},
        {
            "radix_eviction_policy": eviction.value,
            "schedule_policy": schedule.value,
            "max_running_requests": info.max_running_requests,
        },
    )


def given_from_argv(engine: str, argv: Sequence[str]) -> dict[str, JSONValue]:
    """Model settings an engine's command line fixes that the engine does not report
    (``kvroute engines up`` records it), as config field names and values.

    llama.cpp: ``--parallel`` turns the unified KV buffer off unless ``--kv-unified``;
    ``--cache-ram``, ``--slot-prompt-similarity``, ``--cache-reuse``,
    ``--[no-]cache-idle-slots``, ``--no-cache-prompt``. vLLM: ``--max-num-seqs``.
    """
    args = _split_equals(argv)
    found: dict[str, JSONValue] = {}
    if engine == "llamacpp":
        if _has(args, "-np", "--parallel"):
            found["kv_unified"] = False
        if _has(args, "-kvu", "--kv-unified"):
            found["kv_unified"] = True
        if _has(args, "-no-kvu", "--no-kv-unified"):
            found["kv_unified"] = False
        for names, key, kind in (
            (("-cram", "--cache-ram"), "cache_ram_mib", int),
            (("-sps", "--slot-prompt-similarity"), "slot_prompt_similarity", float),
            (("--cache-reuse",), "cache_reuse", int),
        ):
            value = _value(args, *names)
            if value is not None:
                found[key] = kind(value)
        if _has(args, "--cache-idle-slots"):
            found["cache_idle_slots"] = True
        if _has(args, "--no-cache-idle-slots"):
            found["cache_idle_slots"] = False
        if _has(args, "--no-cache-prompt"):
            found["cache_prompt"] = False
    elif engine == "vllm":
        value = _value(args, "--max-num-seqs")
        if value is not None:
            found["max_num_seqs"] = int(value)
    return found


def with_given(
    settings: EngineSettings, engine: str, values: Mapping[str, JSONValue]
) -> EngineSettings:
    """``settings`` with ``engine``'s config fields replaced by ``values``."""
    if engine == "llamacpp":
        llama: LlamaCppConfig = dataclasses.replace(settings.llamacpp, **values)
        return dataclasses.replace(settings, llamacpp=llama)
    if engine == "vllm":
        vllm: VllmConfig = dataclasses.replace(settings.vllm, **values)
        return dataclasses.replace(settings, vllm=vllm)
    return settings


def _split_equals(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        if arg.startswith("-") and "=" in arg:
            out.extend(arg.split("=", 1))
        else:
            out.append(arg)
    return out


def _has(args: Sequence[str], *names: str) -> bool:
    return any(a in names for a in args)


def _value(args: Sequence[str], *names: str) -> str | None:
    value = None
    for i, a in enumerate(args[:-1]):
        if a in names:
            value = args[i + 1]  # the last occurrence wins, as in argument parsers
    return value
