"""Engine flags for the advised deployment, each with the reason it has that value. Pure.

Only flags that exist in the pinned engines' ``--help`` are written
(``tests/advise/test_flags.py`` checks them against the installed llama-server, vLLM
and SGLang); :data:`FLAG_NAMES` lists them per engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvroute.advise.hardware import DeviceKind, Hardware
from kvroute.advise.result import ClassDecision, EngineFlags, Flag, Move
from kvroute.advise.rules import LLAMACPP_MAX_SLOTS, PINNED_VERSIONS
from kvroute.analyze.result import EQUIVALENT_BELOW

FLAG_NAMES = {
    "vllm": (
        "--enable-prefix-caching",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--block-size",
        "--max-model-len",
        "--tensor-parallel-size",
    ),
    "sglang": (
        "--schedule-policy",
        "--page-size",
        "--chunked-prefill-size",
        "--max-running-requests",
        "--mem-fraction-static",
        "--tp-size",
        "--device",
        "--attention-backend",
        "--max-total-tokens",
    ),
    "llamacpp": ("-np", "-c", "--cache-reuse", "--cache-ram"),
}

FP8_MIN_GAIN = 0.01
"""fp8 KV is advised when doubling the pool gains at least one point of the figure."""
PREFILL_CHUNK_TOKENS = 8192
HEADROOM = 2.0
"""Batch limits at twice the p90 concurrency: bursts above p90 queue less."""


@dataclass(frozen=True, slots=True)
class TraceLimits:
    max_sequence_tokens: int
    """The longest prompt + output of the trace."""
    prompt_p90_tokens: int


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1.0))))


def _classes_of(engine: str, decisions: Sequence[ClassDecision]) -> list[ClassDecision]:
    """The classes an engine serves: those advised to it, and those it keeps serving as
    the primary of a canary towards another engine."""
    return [
        d
        for d in decisions
        if d.engine == engine or (d.incumbent == engine and d.move is not Move.STAY)
    ]


def _concurrency(classes: list[ClassDecision]) -> float:
    return sum(d.concurrency_p90 for d in classes)


def _overlap(classes: list[ClassDecision]) -> float:
    n = sum(d.num_requests for d in classes)
    return sum(d.overlap * d.num_requests for d in classes) / n if n else 0.0


def _fp8(classes: list[ClassDecision], hw: Hardware) -> Flag | None:
    if hw.fp8_capacity is None:
        return None
    gains = [
        (d.capacity.value_with_fp8 or 0.0) - d.capacity.value_at_pool
        for d in classes
        if d.capacity is not None and d.capacity.value_with_fp8 is not None
    ]
    gain = max(gains, default=0.0)
    if gain < FP8_MIN_GAIN:
        return None
    return Flag(
        "--kv-cache-dtype",
        "fp8",
        f"{hw.gpu} has fp8: the pool grows to {hw.fp8_capacity.tokens:,} tokens and the "
        f"figure by {gain * 100:.1f} pp (>= {FP8_MIN_GAIN * 100:.0f} pp)",
    )


def vllm_flags(classes: list[ClassDecision], hw: Hardware, limits: TraceLimits) -> list[Flag]:
    conc = _concurrency(classes)
    seqs = max(16, _pow2_at_least(conc * HEADROOM))
    flags = [
        Flag(
            "--enable-prefix-caching",
            None,
            f"prefix overlap {_overlap(classes):.1%} of the classes it serves; on by default in "
            "V1, stated so a config change cannot turn it off",
        ),
        Flag(
            "--block-size",
            "16",
            "16-token blocks: what simulate modelled and the gateway's live overlap counts",
        ),
        Flag(
            "--max-num-seqs",
            str(seqs),
            f"{HEADROOM:g} x the p90 concurrency {conc:.1f} of its classes, at least 16",
        ),
        Flag(
            "--max-num-batched-tokens",
            str(PREFILL_CHUNK_TOKENS),
            f"prefill chunk per step; p90 prompt {limits.prompt_p90_tokens:,} tokens",
        ),
        Flag(
            "--max-model-len",
            str(_pow2_at_least(limits.max_sequence_tokens)),
            f"longest prompt + output of the trace {limits.max_sequence_tokens:,} tokens, "
            "rounded up to a power of two",
        ),
    ]
    if hw.kind is not DeviceKind.CPU:
        flags.append(
            Flag(
                "--gpu-memory-utilization",
                f"{hw.gpu_memory_utilization:g}",
                f"the share the KV pool of {hw.pool_tokens:,} tokens was sized with",
            )
        )
        flags.append(
            Flag("--tensor-parallel-size", str(hw.num_gpus), f"{hw.num_gpus} GPU(s) given")
        )
    fp8 = _fp8(classes, hw)
    if fp8 is not None:
        flags.append(fp8)
    return flags


def sglang_flags(classes: list[ClassDecision], hw: Hardware, limits: TraceLimits) -> list[Flag]:
    overlap = _overlap(classes)
    conc = _concurrency(classes)
    policy = "lpm" if overlap >= EQUIVALENT_BELOW else "fcfs"
    flags = [
        Flag(
            "--schedule-policy",
            policy,
            f"overlap {overlap:.1%}: "
            + (
                "longest-prefix-match first keeps shared prefixes hot"
                if policy == "lpm"
                else f"below {EQUIVALENT_BELOW:.0%} prefix order buys little; first come first served"
            ),
        ),
        Flag("--page-size", "1", "token-level radix reuse (what simulate modelled)"),
        Flag(
            "--chunked-prefill-size",
            str(PREFILL_CHUNK_TOKENS),
            f"prefill chunk per step; p90 prompt {limits.prompt_p90_tokens:,} tokens",
        ),
        Flag(
            "--max-running-requests",
            str(max(16, _pow2_at_least(conc * HEADROOM))),
            f"{HEADROOM:g} x the p90 concurrency {conc:.1f} of its classes, at least 16",
        ),
    ]
    if hw.kind is not DeviceKind.CPU:
        flags.append(
            Flag(
                "--mem-fraction-static",
                f"{hw.gpu_memory_utilization:g}",
                f"the share the KV pool of {hw.pool_tokens:,} tokens was sized with",
            )
        )
        flags.append(Flag("--tp-size", str(hw.num_gpus), f"{hw.num_gpus} GPU(s) given"))
    else:
        flags += [
            Flag("--device", "cpu", "the CPU testbed (with SGLANG_USE_CPU_ENGINE=1)"),
            Flag(
                "--attention-backend",
                "torch_native",
                "the attention backend SGLang's CPU engine runs without its GPU kernels",
            ),
            Flag(
                "--max-total-tokens",
                str(hw.pool_tokens),
                f"the KV pool advise sized on the CPU: {hw.pool_tokens:,} tokens",
            ),
        ]
    return flags


def llamacpp_slots(concurrency: float) -> int:
    """``-np``: one slot per concurrent request, at most the feasibility rule's slots."""
    return int(min(LLAMACPP_MAX_SLOTS, max(1, math.ceil(concurrency))))


def llamacpp_flags(classes: list[ClassDecision], hw: Hardware, limits: TraceLimits) -> list[Flag]:
    conc = _concurrency(classes)
    slots = llamacpp_slots(conc)
    per_slot = _pow2_at_least(limits.max_sequence_tokens)
    return [
        Flag("-np", str(slots), f"one slot per concurrent request: p90 concurrency {conc:.1f}"),
        Flag(
            "-c",
            str(slots * per_slot),
            f"{slots} slots x {per_slot:,} tokens (the longest prompt + output, "
            f"{limits.max_sequence_tokens:,}, rounded up): -c is shared by all slots",
        ),
        Flag(
            "--cache-reuse",
            "256",
            "reuse cached chunks of at least 256 tokens by shifting the KV cache, "
            "where a prompt repeats text after an edit",
        ),
        Flag(
            "--cache-ram",
            "8192",
            "keep prompts a slot drops in 8 GiB of host memory: sessions come back warm "
            "(what the slot model simulated)",
        ),
    ]


_BUILDERS = {"vllm": vllm_flags, "sglang": sglang_flags, "llamacpp": llamacpp_flags}


def engine_replicas(engine: str, decisions: Sequence[ClassDecision]) -> tuple[int, str]:
    """The most replicas any class advised to ``engine`` was advised (capacity_plan.py),
    and why; 1 when none was."""
    advised = [
        (d.workload, d.capacity, d.capacity.replicas)
        for d in decisions
        if d.engine == engine
        and d.capacity is not None
        and d.capacity.replicas is not None
        and d.capacity.replicas.advised
    ]
    if not advised:
        return 1, "one instance: no class it serves was advised replicas"
    name, plan, reps = max(advised, key=lambda a: a[2].num_replicas)
    return reps.num_replicas, (
        f"{name}: capacity is the lever; {reps.num_replicas} replicas routed by session "
        f"reach {reps.cache_aware:.1%} (round robin {reps.round_robin:.1%}, one instance "
        f"{plan.value_at_pool:.1%})"
    )


def engine_flags(
    decisions: Sequence[ClassDecision], hw: Hardware, limits: TraceLimits
) -> list[EngineFlags]:
    """Flags for every engine some class runs on (see :func:`_classes_of`)."""
    out = []
    for engine in ("vllm", "sglang", "llamacpp"):
        classes = _classes_of(engine, decisions)
        if classes:
            n, why = engine_replicas(engine, decisions)
            flags = _BUILDERS[engine](classes, hw, limits)
            out.append(EngineFlags(engine, PINNED_VERSIONS[engine], flags, n, why))
    return out
