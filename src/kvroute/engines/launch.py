"""The command line and environment that start each local engine, one launcher per engine.

Options mean the same for every engine, so two engines started alike are comparable:
``parallel`` sequences at once with ``ctx_tokens`` of context *each*. llama.cpp's
``-c`` is the total context its ``--parallel`` slots share, so it gets
``parallel × ctx_tokens``; vLLM's ``--max-model-len`` is per sequence already.

Every server binds 127.0.0.1 only and is started with what its adapter needs to read
cache counters, per-response cache usage and to reset its cache (see each adapter's
module docstring). Launchers look up installed files (and raise :class:`EngineError`
with the install command when they are missing); they start nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy
from kvroute.engines.paths import default_model_path, llama_server_path
from kvroute.engines.sglang_paths import sglang_python_path
from kvroute.engines.vllm_paths import vllm_model_dir, vllm_python_path
from kvroute.errors import EngineError
from kvroute.registry import Registry

HOST = "127.0.0.1"
SGLANG_EVICTION_POLICIES = (EvictionPolicy.LRU, EvictionPolicy.LFU)
"""The ``--radix-eviction-policy`` values of SGLang 0.5.23 that kvroute's model has."""
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """How to start one replica. ``threads`` None: one per CPU the replica is given."""

    parallel: int = 4
    ctx_tokens: int = 4096
    threads: int | None = None
    model_name: str = DEFAULT_MODEL_NAME
    model_path: Path | None = None
    """None: the installed default (the GGUF for llama.cpp, its HF conversion for vLLM)."""
    vllm_kv_cache_gib: int = 1
    """vLLM-CPU's KV pool (``VLLM_CPU_KVCACHE_SPACE``); 1 GiB ≈ 45k tokens of SmolLM2."""
    vllm_block_size_tokens: int = 32
    """vLLM's KV block. vLLM's GPU default is 16; the CPU attention backend accepts only
    multiples of 32 and picks 128 unless told, with which a prompt shorter than one
    block never hits. 32 is the nearest to production GPUs it can do."""
    vllm_enforce_eager: bool = False
    """Skip torch.compile: ready in ~30 s instead of ~2 min on 2 cores, decode speed
    within this machine's noise. Caching behaviour is the same either way."""
    vllm_dtype: str | None = None
    """None: bfloat16 where the CPU computes it natively (AVX512-BF16 or AMX), else
    float32 (emulated bfloat16 is several times slower on AVX2-only machines)."""
    sglang_max_total_tokens: int = 32768
    """SGLang's KV pool in tokens (``--max-total-tokens``). Unset, SGLang sizes it from
    free memory: 14.9 GB and 37 s of start-up on this machine for a 135M model."""
    sglang_page_size: int = 1
    """``--page-size``: 1 is a token-level radix tree (SGLang's default)."""
    sglang_eviction_policy: EvictionPolicy = EvictionPolicy.LRU
    """``--radix-eviction-policy``: SGLang 0.5.23 accepts ``lru`` and ``lfu`` of the
    orders kvroute models (its ``slru``/``priority``/``tlru`` are not modelled)."""
    sglang_schedule_policy: SchedulePolicy = SchedulePolicy.FCFS
    """``--schedule-policy`` (the modelled ones: ``fcfs``, SGLang's default, and ``lpm``)."""

    def __post_init__(self) -> None:
        if self.parallel < 1 or self.ctx_tokens < 16:
            raise EngineError(
                f"parallel must be ≥ 1 and ctx ≥ 16 (got {self.parallel}, {self.ctx_tokens})"
            )
        if self.threads is not None and self.threads < 1:
            raise EngineError(f"threads must be ≥ 1 (got {self.threads})")
        if self.sglang_page_size < 1 or self.sglang_max_total_tokens < self.sglang_page_size:
            raise EngineError(
                "sglang page size must be ≥ 1 and the pool at least one page "
                f"(got {self.sglang_page_size}, {self.sglang_max_total_tokens})"
            )
        if self.sglang_eviction_policy not in SGLANG_EVICTION_POLICIES:
            names = ", ".join(p.value for p in SGLANG_EVICTION_POLICIES)
            raise EngineError(
                f"SGLang has no radix eviction policy {self.sglang_eviction_policy.value!r}",
                hint=f"one of {names}",
            )


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """What to run: ``argv``, variables to add to the environment, and how long the
    engine may take to become ready on this kind of machine."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    ready_timeout_s: float


class Launcher(Protocol):
    """Builds one engine's command. ``cpus`` are the CPU ids this replica may use;
    ``run_dir`` is a directory of its own for files the engine writes."""

    def command(
        self, *, port: int, options: LaunchOptions, cpus: Sequence[int], run_dir: Path
    ) -> LaunchCommand: ...


class LlamaCppLauncher:
    """``llama-server`` with metrics, slots, slot erase, and no host-RAM prompt cache.

    ``--cache-ram 0``: recent builds keep evicted prompts in host memory and bring
    them back, which would make an erased slot warm again and hide the slot behaviour
    kvroute's llama.cpp cache model describes.
    """

    def command(
        self, *, port: int, options: LaunchOptions, cpus: Sequence[int], run_dir: Path
    ) -> LaunchCommand:
        model = options.model_path or default_model_path()
        if not model.is_file():
            raise EngineError(
                f"model file missing: {model}", hint="run `scripts/install-engines model`"
            )
        threads = options.threads or max(1, len(cpus))
        argv = (
            str(llama_server_path()),
            "--model", str(model),
            "--alias", options.model_name,
            "--host", HOST,
            "--port", str(port),
            "--parallel", str(options.parallel),
            "--ctx-size", str(options.parallel * options.ctx_tokens),
            "--threads", str(threads),
            "--metrics",
            "--slots",
            "--slot-save-path", str(run_dir / "slots"),
            "--cache-ram", "0",
            "--no-webui",
        )  # fmt: skip
        return LaunchCommand(argv=argv, env={}, ready_timeout_s=120.0)


class VllmLauncher:
    """vLLM-CPU's OpenAI server from its own virtualenv, offline, prefix caching on.

    Started as ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console
    script looks up package metadata under the name ``vllm``, which the ``vllm-cpu``
    distribution does not provide.
    """

    def command(
        self, *, port: int, options: LaunchOptions, cpus: Sequence[int], run_dir: Path
    ) -> LaunchCommand:
        model = options.model_path or vllm_model_dir()
        if options.threads is not None:
            cpus = list(cpus)[: options.threads]
        dtype = options.vllm_dtype or ("bfloat16" if cpu_has_native_bf16() else "float32")
        argv = (
            str(vllm_python_path()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model),
            "--served-model-name", options.model_name,
            "--host", HOST,
            "--port", str(port),
            "--max-model-len", str(options.ctx_tokens),
            "--max-num-seqs", str(options.parallel),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--block-size", str(options.vllm_block_size_tokens),
            "--dtype", dtype,
            *(("--enforce-eager",) if options.vllm_enforce_eager else ()),
        )  # fmt: skip
        env = {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(options.vllm_kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": cpu_list(cpus),
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            # vLLM drops torch to one thread "for serving" unless this is set.
            "OMP_NUM_THREADS": str(len(cpus)),
            "VLLM_SERVER_DEV_MODE": "1",  # registers POST /reset_prefix_cache
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        return LaunchCommand(argv=argv, env=env, ready_timeout_s=600.0)


class SglangLauncher:
    """SGLang's own server (``python -m sglang.launch_server``) from its virtualenv, on
    the CPU with plain-torch layers (see ``engines-support/sglang``), offline.

    ``SGLANG_USE_CPU_ENGINE=1`` selects SGLang's CPU platform (without it start-up dies
    importing vLLM); ``--sleep-on-idle`` stops the scheduler's busy loop (an idle server
    otherwise keeps about half a core busy); ``--enable-cache-report`` puts
    ``cached_tokens`` in OpenAI usage; ``--enable-metrics`` serves ``/metrics``.
    """

    def command(
        self, *, port: int, options: LaunchOptions, cpus: Sequence[int], run_dir: Path
    ) -> LaunchCommand:
        python = sglang_python_path()
        model = options.model_path or vllm_model_dir()
        if options.threads is not None:
            cpus = list(cpus)[: options.threads]
        dtype = "bfloat16" if cpu_has_native_bf16() else "float32"
        argv = (
            str(python), "-m", "sglang.launch_server",
            "--model-path", str(model),
            "--served-model-name", options.model_name,
            "--host", HOST,
            "--port", str(port),
            "--device", "cpu",
            "--attention-backend", "torch_native",
            "--dtype", dtype,
            "--context-length", str(options.ctx_tokens),
            "--max-running-requests", str(options.parallel),
            "--max-total-tokens", str(options.sglang_max_total_tokens),
            "--page-size", str(options.sglang_page_size),
            "--radix-eviction-policy", options.sglang_eviction_policy.value,
            "--schedule-policy", options.sglang_schedule_policy.value,
            "--enable-cache-report",
            "--enable-metrics",
            "--sleep-on-idle",
        )  # fmt: skip
        env = {
            "SGLANG_USE_CPU_ENGINE": "1",
            "SGLANG_CPU_OMP_THREADS_BIND": cpu_list(cpus),
            "OMP_NUM_THREADS": str(len(cpus)),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "DO_NOT_TRACK": "1",
        }
        return LaunchCommand(argv=argv, env=env, ready_timeout_s=600.0)


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU flags include ``avx512_bf16`` or ``amx_bf16``."""
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_list(cpus: Sequence[int]) -> str:
    """CPU ids in Linux cpulist form, ranges compressed: ``[0, 1, 2, 5]`` -> ``0-2,5``."""
    if not cpus:
        raise EngineError("no CPU to run on")
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = ordered[0]
    for cpu in [*ordered[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def split_cpus(cpus: Sequence[int], num_replicas: int) -> list[list[int]]:
    """Give each replica its own CPUs when there are enough; with more replicas than
    CPUs, one CPU each, taken in turn (so two replicas share each CPU, not all of them).

    Two llama.cpp servers spinning on the same two cores run slower together than
    one; disjoint sets keep each one's decode speed predictable.
    """
    ordered = sorted(set(cpus))
    if num_replicas < 1:
        raise EngineError(f"replicas must be ≥ 1 (got {num_replicas})")
    if not ordered:
        raise EngineError("no CPU to run on")
    if num_replicas > len(ordered):
        return [[ordered[i % len(ordered)]] for i in range(num_replicas)]
    share = len(ordered) // num_replicas
    return [ordered[i * share : (i + 1) * share] for i in range(num_replicas)]


@dataclass(frozen=True, slots=True)
class CpuPlan:
    """Which CPUs each replica gets and how many compute threads it runs."""

    cpu_sets: list[list[int]]
    threads: int
    """Per replica: ``--threads`` when given, else the CPUs ÷ replicas (at least one)."""
    num_cpus: int

    @property
    def oversubscribed(self) -> bool:
        """More compute threads than CPUs: replicas then slow each other down (on two
        cores, three replicas at two threads each made TPOT 15x worse)."""
        return self.threads * len(self.cpu_sets) > self.num_cpus


def plan_cpus(cpus: Sequence[int], num_replicas: int, threads: int | None) -> CpuPlan:
    """The CPU sets of :func:`split_cpus` and the threads per replica: ``threads`` when
    given, else each replica's share of the CPUs (at least one)."""
    sets = split_cpus(cpus, num_replicas)
    num_cpus = len(set(cpus))
    return CpuPlan(
        cpu_sets=sets,
        threads=threads or max(1, num_cpus // num_replicas),
        num_cpus=num_cpus,
    )


def launcher_registry() -> Registry[Launcher]:
    """The engines ``kvroute engines up`` can start here."""
    registry: Registry[Launcher] = Registry("local engine")
    registry.add("llamacpp", LlamaCppLauncher())
    registry.add("vllm", VllmLauncher())
    registry.add("sglang", SglangLauncher())
    return registry
