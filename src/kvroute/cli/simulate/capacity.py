"""``kvroute simulate``: which engines, and how big a KV pool, from the command line."""

from __future__ import annotations

import re
from decimal import Decimal

from kvroute.cache.capacity import (
    DEFAULT_OVERHEAD_BYTES,
    GIB,
    Capacity,
    capacity_from_blocks,
    capacity_from_hardware,
    capacity_from_tokens,
    resolve_gpu,
    resolve_model,
)
from kvroute.cache.registry import cache_models
from kvroute.errors import UsageError

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_GPU = "h100-80gb"


def parse_engines(text: str) -> tuple[str, ...]:
    """``--engines``: registered model names, each once."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UsageError("--engines is empty", hint="e.g. --engines llamacpp,vllm,sglang")
    registry = cache_models()
    for name in names:
        registry.get(name)  # raises UsageError listing the valid names
    if len(set(names)) != len(names):
        raise UsageError("an engine is listed twice in --engines")
    return names


_TOKENS = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)\s*$")
_BYTES = re.compile(r"^\s*[0-9]*\.?[0-9]+\s*[kKmMgGtT]?i?[bB]\s*$")
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_UNBOUNDED = ("inf", "unbounded", "none")


def parse_tokens(text: str, option: str, *, examples: str = "65536, 64k, 64Ki or 1.5M") -> int:
    """A whole number of tokens: ``65536``, ``64k`` (64,000), ``64Ki`` (65,536), ``1.5M``.

    A size in bytes (``80GiB``) is refused: token options count tokens, and a pool sized
    from memory comes from ``--model`` on ``--gpu``.
    """
    if _BYTES.match(text):
        raise UsageError(
            f"{option} counts tokens, but {text!r} is a size in bytes",
            hint=f"give a token count such as {examples}, or size the pool from memory "
            "with --model M --gpu 80GiB instead",
        )
    m = _TOKENS.match(text)
    if not m:
        raise UsageError(
            f"cannot read {option} {text!r}", hint=f"give a token count such as {examples}"
        )
    number, prefix, binary = m.groups()
    tokens = Decimal(number) * (1024 if binary else 1000) ** _POWERS[prefix.lower()]
    if tokens != tokens.to_integral_value():
        raise UsageError(
            f"{option} {text!r} is not a whole number of tokens", hint=f"e.g. {examples}"
        )
    return int(tokens)


def parse_sizes(text: str) -> tuple[int, ...]:
    """``--sweep-sizes``: positive token counts, sorted, without repeats."""
    parts = [part for part in text.split(",") if part.strip()]
    for part in parts:
        if part.strip().lower() in _UNBOUNDED:
            raise UsageError(
                f"--sweep-sizes takes finite token counts, not {part.strip()!r}",
                hint="an unbounded pool is --capacity-tokens inf; sweep sizes like 64k,256k,1M",
            )
    sizes = tuple(parse_tokens(part, "--sweep-sizes") for part in parts)
    if not sizes or any(s < 1 for s in sizes):
        raise UsageError("--sweep-sizes needs positive sizes", hint="e.g. 64k,256k,1M")
    return tuple(sorted(set(sizes)))


def resolve_capacity(
    capacity_tokens: str | None,
    capacity_blocks: int | None,
    block_size: int,
    model: str | None,
    gpu: str | None,
    num_gpus: int,
    gpu_util: float,
    kv_dtype: str,
    weights_gib: float | None,
    overhead_gib: float | None,
) -> Capacity:
    """The KV pool: given in tokens or blocks, else sized from the model on the GPU."""
    if capacity_tokens is not None and capacity_blocks is not None:
        raise UsageError("give --capacity-tokens or --capacity-blocks, not both")
    given = capacity_tokens is not None or capacity_blocks is not None
    if given and gpu is not None:
        raise UsageError("--gpu sizes the pool from memory; drop it or drop --capacity-*")
    shape = resolve_model(model) if model is not None else None
    if capacity_tokens is not None:
        unbounded = capacity_tokens.strip().lower() in _UNBOUNDED
        tokens = (
            None
            if unbounded
            else parse_tokens(
                capacity_tokens,
                "--capacity-tokens",
                examples="65536, 64k, 64Ki, 1.5M or inf (unbounded)",
            )
        )
        return capacity_from_tokens(tokens, model=shape, kv_dtype=kv_dtype)
    if capacity_blocks is not None:
        return capacity_from_blocks(capacity_blocks, block_size, model=shape, kv_dtype=kv_dtype)
    return capacity_from_hardware(
        shape or resolve_model(DEFAULT_MODEL),
        resolve_gpu(gpu or DEFAULT_GPU),
        num_gpus=num_gpus,
        utilization=gpu_util,
        kv_dtype=kv_dtype,
        overhead_bytes=DEFAULT_OVERHEAD_BYTES if overhead_gib is None else int(overhead_gib * GIB),
        weight_bytes=None if weights_gib is None else int(weights_gib * GIB),
    )
