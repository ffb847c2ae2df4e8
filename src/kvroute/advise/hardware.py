"""The hardware advise plans for: the KV pool the model leaves, the kind of device, fp8.

The pool comes from :mod:`kvroute.cache.capacity` (the same sizing as ``kvroute
simulate --model --gpu``); a model that leaves no KV memory raises its one-line
:class:`UsageError` there. ``cpu`` is the local testbed: weights in host memory and a KV
pool of ``cpu_kv_gib`` (vLLM-CPU's ``VLLM_CPU_KVCACHE_SPACE``). Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kvroute.cache.capacity import (
    GIB,
    Capacity,
    ModelShape,
    capacity_from_hardware,
    capacity_from_tokens,
    resolve_gpu,
)

CPU = "cpu"

CONSUMER_GPUS = frozenset({"rtx4090"})
"""Presets of desktop cards: one user, zero ops, where llama.cpp is at home."""

FP8_GPUS = frozenset({"l4", "l40s", "rtx4090", "h100-80gb", "h200"})
"""Ada and Hopper presets: fp8 in hardware, so ``--kv-cache-dtype fp8`` halves KV bytes at
no compute cost. Ampere (A10G, A100) has no fp8 units."""


class DeviceKind(enum.Enum):
    DATACENTER = "datacenter_gpu"
    CONSUMER = "consumer_gpu"
    CPU = "cpu"


@dataclass(frozen=True, slots=True)
class Hardware:
    gpu: str
    """The preset key, a memory size, or ``cpu``."""
    kind: DeviceKind
    num_gpus: int
    model: ModelShape
    capacity: Capacity
    fp8_capacity: Capacity | None
    """The pool with fp8 KV, where the device has fp8 and the pool is not already fp8."""
    gpu_memory_utilization: float

    @property
    def pool_tokens(self) -> int:
        assert self.capacity.tokens is not None  # hardware pools are always bounded
        return self.capacity.tokens


def resolve_hardware(
    model: ModelShape,
    gpu: str,
    *,
    num_gpus: int = 1,
    utilization: float = 0.9,
    kv_dtype: str = "auto",
    cpu_kv_gib: float = 1.0,
) -> Hardware:
    """The KV pool of ``model`` on ``num_gpus`` x ``gpu``. Raises :class:`UsageError` when
    the GPU is unknown or the model leaves no KV memory on it."""
    key = gpu.strip().lower()
    if key == CPU:
        tokens = max(1, int(cpu_kv_gib * GIB) // model.kv_bytes_per_token(kv_dtype))
        cap = capacity_from_tokens(tokens, model=model, kv_dtype=kv_dtype)
        return Hardware(CPU, DeviceKind.CPU, 1, model, cap, None, utilization)
    spec = resolve_gpu(gpu)
    cap = capacity_from_hardware(
        model, spec, num_gpus=num_gpus, utilization=utilization, kv_dtype=kv_dtype
    )
    fp8 = None
    if spec.key in FP8_GPUS and kv_dtype != "fp8":
        fp8 = capacity_from_hardware(
            model, spec, num_gpus=num_gpus, utilization=utilization, kv_dtype="fp8"
        )
    kind = DeviceKind.CONSUMER if spec.key in CONSUMER_GPUS else DeviceKind.DATACENTER
    return Hardware(spec.key, kind, num_gpus, model, cap, fp8, utilization)
