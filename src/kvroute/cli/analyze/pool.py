"""``kvroute analyze``'s KV pool: in tokens, or sized from a model on a GPU as simulate does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import click

from kvroute.cache.capacity import DEFAULT_UTILIZATION, KV_DTYPE_BYTES, Capacity, parse_size
from kvroute.cli.simulate.capacity import DEFAULT_GPU, DEFAULT_MODEL, resolve_capacity
from kvroute.errors import UsageError

DEFAULT_CAPACITY = "256Ki"
"""The breakers' per-engine figures' pool when the user names none (not the user's pool)."""

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True, slots=True)
class AnalyzePool:
    """The pool analyze works at."""

    tokens: int | None
    """The per-engine breaker figures' pool (``None``: ideal figures only)."""
    given: bool
    """Whether the user named a pool (then the verdict is decided at it)."""
    sized_from: str | None = None
    """How the pool was sized when it came from a model on GPUs, for the report."""


def pool_options(command: F) -> F:
    """``command`` with ``--capacity-tokens``, ``--model``, ``--gpu``, ``--num-gpus``,
    ``--gpu-util`` and ``--kv-dtype`` (parameters ``capacity_text``, ``model``, ``gpu``,
    ``num_gpus``, ``gpu_util``, ``kv_dtype``)."""
    options = [
        click.option(
            "--capacity-tokens",
            "capacity_text",
            help="Your KV pool, in tokens (64k is 64,000, 64Ki is 65,536; 'none': ideal "
            "figures only). Given (or sized from --model/--gpu), the verdict is decided on "
            "what an ideal LRU cache of that size serves, not on unlimited memory, and the "
            "capacity figures show it; it also sizes the per-engine before/after figures of "
            f"the cache breakers ({DEFAULT_CAPACITY} when no pool is given). Not with "
            "--model/--gpu.",
        ),
        click.option(
            "--model",
            help="Size your KV pool from this model (preset, config.json or .gguf) on --gpu, "
            f"as `kvroute simulate` does (--gpu alone: {DEFAULT_MODEL}).",
        ),
        click.option(
            "--gpu",
            help="GPU preset or memory size (e.g. 80GiB) the pool is sized on "
            f"(--model alone: {DEFAULT_GPU}).",
        ),
        click.option(
            "--num-gpus",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="GPUs (tensor parallel) of the --model/--gpu pool.",
        ),
        click.option(
            "--gpu-util",
            type=click.FloatRange(0.01, 1.0),
            default=DEFAULT_UTILIZATION,
            show_default=True,
            help="Share of GPU memory the engine may use (vLLM --gpu-memory-utilization).",
        ),
        click.option(
            "--kv-dtype",
            type=click.Choice(list(KV_DTYPE_BYTES)),
            default="auto",
            show_default=True,
            help="KV cache element type of the --model/--gpu pool (auto: the model's).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def resolve_pool(
    capacity_text: str | None,
    model: str | None,
    gpu: str | None,
    *,
    num_gpus: int,
    gpu_util: float,
    kv_dtype: str,
) -> AnalyzePool:
    """The pool from the options. Raises ``UsageError`` (exit 2) for an unreadable size,
    an unknown model or GPU, a model that leaves no KV memory, a pool given both in tokens
    and by ``--model``/``--gpu``, and ``--num-gpus``/``--gpu-util``/``--kv-dtype``
    without ``--model``/``--gpu``."""
    if capacity_text is not None and (model is not None or gpu is not None):
        given = "--model" if model is not None else "--gpu"
        raise UsageError(
            f"--capacity-tokens and {given} both size the KV pool; give one",
            hint="--capacity-tokens 1Mi, or --model llama-3.1-8b --gpu h100-80gb",
        )
    if model is not None or gpu is not None:
        capacity = resolve_capacity(
            None, None, 16, model, gpu, num_gpus, gpu_util, kv_dtype, None, None
        )
        return AnalyzePool(capacity.tokens, given=True, sized_from=sized_from(capacity))
    sizing = {
        "--num-gpus": num_gpus != 1,
        "--gpu-util": gpu_util != DEFAULT_UTILIZATION,
        "--kv-dtype": kv_dtype != "auto",
    }
    for option, changed in sizing.items():
        if changed:
            raise UsageError(
                f"{option} sizes a pool from --model/--gpu, and neither is given",
                hint=f"add --model M --gpu G, or drop {option}",
            )
    if capacity_text is None:
        return AnalyzePool(parse_size(DEFAULT_CAPACITY), given=False)
    if capacity_text.strip().lower() == "none":
        return AnalyzePool(None, given=True)
    return AnalyzePool(parse_size(capacity_text, what="--capacity-tokens"), given=True)


def sized_from(capacity: Capacity) -> str:
    """``llama-3.1-8b on 1 x h100-80gb at 90 % of memory``."""
    dtype = f", {capacity.kv_dtype} KV" if capacity.kv_dtype not in (None, "auto") else ""
    util = f" at {capacity.utilization:.0%} of memory" if capacity.utilization is not None else ""
    return f"{capacity.model} on {capacity.num_gpus} x {capacity.gpu}{util}{dtype}"
