"""What the step-time model needs to know about a model on some hardware.

Everything comes from the shared presets (:mod:`kvroute.cache.capacity`: ``presets.json``
carries bandwidth and dense FLOPs per dtype next to each GPU's memory, and parameter count
and attention width next to each model's KV shape), so ``simulate`` and ``predict`` size
the same pool from the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.cache.capacity import GpuSpec, ModelShape
from kvroute.errors import UsageError

WEIGHT_DTYPE_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp32": 4.0,
    "fp8": 1.0,
    "q8_0": 34 / 32,
    "q4_1": 20 / 32,
}
"""Bytes per parameter by ``--dtype`` (the weights' precision; GGUF blocks include scales)."""


@dataclass(frozen=True, slots=True)
class Hardware:
    """``num_gpus`` of one GPU kind, tensor-parallel."""

    key: str
    name: str
    num_gpus: int
    mem_bw_bytes_per_s: float
    flops_per_s: float
    """Dense tensor FLOP/s of one GPU at the weights' dtype."""
    link_bytes_per_s: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class ModelCost:
    """The model as the step-time basis reads it."""

    name: str
    num_layers: int
    num_params: int
    attn_dim: int
    hidden_size: int
    weight_bytes: float
    kv_bytes_per_token: int


def hardware_for(gpu: GpuSpec, *, num_gpus: int = 1, dtype: str = "bf16") -> Hardware:
    """Resolve the speed figures of ``gpu`` at ``dtype``; ``UsageError`` when missing."""
    if num_gpus < 1:
        raise UsageError("need at least one GPU")
    if gpu.mem_bw_bytes_per_s is None or not gpu.dense_flops_per_s:
        known = "see presets.json: a GPU needs mem_bw_gbps and dense_tflops"
        raise UsageError(f"GPU '{gpu.key}' has no speed data for the predictor ({known})")
    flops = dict(gpu.dense_flops_per_s)
    if dtype not in flops:
        # An older GPU without FP8 units runs FP8 weights through its 16-bit path.
        fallback = flops.get("bf16") or flops.get("fp16")
        if fallback is None:
            valid = ", ".join(flops)
            raise UsageError(f"GPU '{gpu.key}' has no FLOPs figure for {dtype} (has: {valid})")
        flops[dtype] = fallback
    return Hardware(
        key=gpu.key,
        name=gpu.name,
        num_gpus=num_gpus,
        mem_bw_bytes_per_s=gpu.mem_bw_bytes_per_s,
        flops_per_s=flops[dtype],
        link_bytes_per_s=gpu.link_bytes_per_s or 0.0,
        memory_bytes=gpu.memory_bytes,
    )


def model_cost(shape: ModelShape, *, dtype: str = "bf16", kv_dtype: str = "auto") -> ModelCost:
    """The step-time view of ``shape``; ``UsageError`` when its size is unknown."""
    if shape.num_params is None or shape.attn_dim is None or shape.hidden_size is None:
        raise UsageError(
            f"model '{shape.name}' lacks a parameter count or attention width for the predictor",
            hint="use a preset or a Hugging Face config.json",
        )
    try:
        per_param = WEIGHT_DTYPE_BYTES[dtype]
    except KeyError:
        valid = ", ".join(WEIGHT_DTYPE_BYTES)
        raise UsageError(f"unknown weight dtype '{dtype}' (valid: {valid})") from None
    return ModelCost(
        name=shape.name,
        num_layers=shape.num_layers,
        num_params=shape.num_params,
        attn_dim=shape.attn_dim,
        hidden_size=shape.hidden_size,
        weight_bytes=shape.num_params * per_param,
        kv_bytes_per_token=shape.kv_bytes_per_token(kv_dtype),
    )
