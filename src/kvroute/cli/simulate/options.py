"""The options of ``kvroute simulate``, in ``--help`` order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kvroute.cache.capacity import DEFAULT_UTILIZATION, KV_DTYPE_BYTES
from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy
from kvroute.cli.simulate.capacity import DEFAULT_GPU, DEFAULT_MODEL
from kvroute.trace.readers import trace_formats
from kvroute.validate.result import ENGINES as VALIDATE_ENGINES

Command = TypeVar("Command", bound=Callable[..., Any])

_PARAMS = (
    click.argument("trace", type=click.Path(path_type=Path, dir_okay=False)),
    click.option(
        "--engines",
        default="llamacpp,vllm,sglang",
        show_default=True,
        help="Comma-separated engine models to replay.",
    ),
    click.option(
        "--format",
        "format_name",
        type=click.Choice(trace_formats().names()),
        help="Force the trace format.",
    ),
    click.option(
        "--tokenizer", help="A .gguf file or a Hugging Face tokenizer directory (as for analyze)."
    ),
    click.option(
        "--workers",
        type=click.IntRange(min=1),
        help="Tokenizer processes. Default: one process (it already encodes on every core) on "
        "fewer than 4 cores or for the first 4,096 requests; past them, on 4 or more cores, a "
        "pool of one per core but one.",
    ),
    click.option("--skip-invalid", is_flag=True, help="Count and skip malformed records."),
    click.option(
        "--capacity-tokens",
        help="KV pool in tokens: 64k is 64,000 and 64Ki is 65,536 (also 1.5M, 1Mi, or 'inf' "
        "for an unbounded cache); reports print capacities the same way, exactly. "
        "Default: sized from --model on --gpu.",
    ),
    click.option(
        "--capacity-blocks",
        type=click.IntRange(min=1),
        help="KV pool in vLLM blocks of --vllm-block-size tokens.",
    ),
    click.option(
        "--model",
        help=f"Model preset, config.json or .gguf: gives KV bytes per token and weights (default with no --capacity-*: {DEFAULT_MODEL}).",
    ),
    click.option(
        "--gpu",
        help=f"GPU preset or memory size (e.g. 80GiB) to size the pool from (default: {DEFAULT_GPU}).",
    ),
    click.option(
        "--num-gpus",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="GPUs (tensor parallel).",
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
        help="KV cache element type, as the engine's --kv-cache-dtype (auto: the model's).",
    ),
    click.option(
        "--weights-gib", type=click.FloatRange(min=0), help="Override the model's weight size."
    ),
    click.option(
        "--overhead-gib",
        type=click.FloatRange(min=0),
        help="Per-GPU activations/CUDA-graph reserve [default: 2].",
    ),
    click.option(
        "--sweep-capacity",
        is_flag=True,
        help="Also replay at a grid of capacities for hit-vs-capacity curves.",
    ),
    click.option(
        "--sweep-sizes",
        help="Capacities for the sweep, e.g. 64k,256k,1M or 64Ki,256Ki,1Mi (implies "
        "--sweep-capacity).",
    ),
    click.option(
        "--vllm-block-size",
        type=click.IntRange(min=1),
        default=16,
        show_default=True,
        help="vLLM tokens per KV block (--block-size): only whole blocks are reused.",
    ),
    click.option(
        "--max-num-seqs",
        type=click.IntRange(min=1),
        default=256,
        show_default=True,
        help="vLLM running requests at most.",
    ),
    click.option(
        "--sglang-page-size",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="SGLang tokens per radix-cache page (--page-size; 1: token-level reuse).",
    ),
    click.option(
        "--sglang-eviction",
        type=click.Choice([p.value for p in EvictionPolicy]),
        default="lru",
        show_default=True,
        help="SGLang radix-cache eviction policy (--radix-eviction-policy).",
    ),
    click.option(
        "--sglang-schedule",
        type=click.Choice([p.value for p in SchedulePolicy]),
        default="fcfs",
        show_default=True,
        help="SGLang scheduling policy (--schedule-policy; lpm: longest cached prefix first).",
    ),
    click.option(
        "--max-running-requests",
        type=click.IntRange(min=1),
        help="SGLang running requests at most (default: memory bound).",
    ),
    click.option(
        "--parallel",
        type=click.IntRange(min=1),
        default=4,
        show_default=True,
        help="llama.cpp slots (-np).",
    ),
    click.option(
        "--kv-unified/--no-kv-unified",
        default=True,
        show_default=True,
        help="llama.cpp unified KV buffer.",
    ),
    click.option(
        "--slot-prompt-similarity",
        type=click.FloatRange(0.0, 1.0),
        default=0.1,
        show_default=True,
        help="llama.cpp: least share of a prompt a slot must already hold to be picked by "
        "similarity (else least recently used).",
    ),
    click.option(
        "--cache-reuse",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="llama.cpp KV-shift chunk size (0: off).",
    ),
    click.option(
        "--cache-ram",
        type=click.IntRange(min=-1),
        default=8192,
        show_default=True,
        help="llama.cpp host prompt cache, MiB (-1: n_ctx tokens, 0: off).",
    ),
    click.option(
        "--cache-idle-slots/--no-cache-idle-slots",
        default=True,
        show_default=True,
        help="llama.cpp: after each launch, save every idle slot to the host prompt cache "
        "(--cache-ram) and, with a unified KV buffer, clear it.",
    ),
    click.option(
        "--rate",
        "rate_per_s",
        type=click.FloatRange(min=0.0001),
        help="Poisson arrivals at this rate instead of the trace's times.",
    ),
    click.option(
        "--prefill-tps",
        type=click.FloatRange(min=0.001),
        default=8000.0,
        show_default=True,
        help="Service model: prefill tokens/s per request.",
    ),
    click.option(
        "--decode-tps",
        type=click.FloatRange(min=0.001),
        default=40.0,
        show_default=True,
        help="Service model: decode tokens/s per request.",
    ),
    click.option(
        "--ignore-trace-times",
        is_flag=True,
        help="Use the service model even where the trace has end times.",
    ),
    click.option(
        "--default-output",
        type=click.IntRange(min=0),
        default=128,
        show_default=True,
        help="Output tokens when the trace has none.",
    ),
    click.option(
        "--no-cache-outputs",
        is_flag=True,
        help="Do not cache generated tokens (compare with the prompt-only ideal).",
    ),
    click.option("--no-ideal", is_flag=True, help="Skip the ideal-cache analysis."),
    click.option(
        "--seed",
        type=int,
        default=0,
        show_default=True,
        help="Seed of drawn output lengths and of --rate arrivals.",
    ),
    click.option(
        "--json",
        "json_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Write the result as JSON (schema kvroute.simulate/1, docs/simulate-json.md); '-' for stdout.",
    ),
    click.option(
        "--html",
        "html_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Write a self-contained HTML report with charts; '-' for stdout.",
    ),
    click.option(
        "--validate",
        "validate_url",
        metavar="URL",
        help="Serve the trace on this running engine and compare the model with what it cached.",
    ),
    click.option(
        "--engine",
        "validate_engine",
        type=click.Choice(list(VALIDATE_ENGINES)),
        help="The engine behind --validate (its model is the one checked).",
    ),
    click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        help="With --validate: a closed loop of N clients instead of the trace's arrival times.",
    ),
    click.option(
        "--no-reset", is_flag=True, help="With --validate: do not reset the engine's cache first."
    ),
    click.option(
        "--latency",
        is_flag=True,
        help=(
            "Also predict each engine's TTFT, TPOT and E2E (as `kvroute predict`, on --model "
            "and --gpu) next to the hit table; in --json as 'latency'."
        ),
    ),
    click.option("-q", "--quiet", is_flag=True, help="No terminal summary or progress."),
)


def simulate_options(command: Command) -> Command:
    """``command`` with the argument and every option of ``kvroute simulate``."""
    for param in reversed(_PARAMS):  # the last decorator applied is the first listed
        command = param(command)
    return command
