"""``kvroute simulate``: replay a trace through the llama.cpp, vLLM and SGLang cache models."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import click
import httpx
import orjson
from click.core import ParameterSource
from rich.console import Console

from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.cache.capacity import (
    DEFAULT_OVERHEAD_BYTES,
    DEFAULT_UTILIZATION,
    GIB,
    KV_DTYPE_BYTES,
    Capacity,
    capacity_from_blocks,
    capacity_from_hardware,
    capacity_from_tokens,
    parse_size,
    resolve_gpu,
    resolve_model,
)
from kvroute.cache.llamacpp import LlamaCppConfig
from kvroute.cache.radix import EvictionPolicy
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.result import Ideal, SimulationResult
from kvroute.cache.sglang import SchedulePolicy, SglangConfig
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate
from kvroute.cache.timing import TimingOptions
from kvroute.cache.validate import ENGINES as VALIDATE_ENGINES
from kvroute.cache.validate import (
    Prediction,
    ValidateOptions,
    ValidationResult,
    given_from_argv,
    http_post,
    validate,
    with_given,
)
from kvroute.cache.vllm import VllmConfig
from kvroute.cli.files import write_atomic
from kvroute.engines.registry import make_adapter
from kvroute.engines.state import EngineRecord, StateDir, default_state_dir
from kvroute.errors import InputError, UsageError
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.io import ReadStats
from kvroute.trace.readers import detect_format, read_trace, trace_formats
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TextPrompt, TokenPrompt

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_GPU = "h100-80gb"


def _engines(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UsageError("--engines is empty", hint="e.g. --engines llamacpp,vllm,sglang")
    registry = cache_models()
    for name in names:
        registry.get(name)  # raises UsageError listing the valid names
    if len(set(names)) != len(names):
        raise UsageError("an engine is listed twice in --engines")
    return names


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(parse_size(part, what="capacity") for part in text.split(",") if part.strip())
    if not sizes or any(s < 1 for s in sizes):
        raise UsageError("--sweep-sizes needs positive sizes", hint="e.g. 64k,256k,1M")
    return tuple(sorted(set(sizes)))


def _capacity(
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
    if capacity_tokens is not None and capacity_blocks is not None:
        raise UsageError("give --capacity-tokens or --capacity-blocks, not both")
    given = capacity_tokens is not None or capacity_blocks is not None
    if given and gpu is not None:
        raise UsageError("--gpu sizes the pool from memory; drop it or drop --capacity-*")
    shape = resolve_model(model) if model is not None else None
    if capacity_tokens is not None:
        unbounded = capacity_tokens.strip().lower() in ("inf", "unbounded", "none")
        tokens = None if unbounded else parse_size(capacity_tokens, what="capacity")
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


@click.command("simulate")
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--engines",
    default="llamacpp,vllm,sglang",
    show_default=True,
    help="Comma-separated engine models to replay.",
)
@click.option(
    "--format",
    "format_name",
    type=click.Choice(trace_formats().names()),
    help="Force the trace format.",
)
@click.option(
    "--tokenizer", help="A .gguf file or a Hugging Face tokenizer directory (as for analyze)."
)
@click.option(
    "--workers", type=click.IntRange(min=1), help="Tokenizer processes (default: all cores)."
)
@click.option("--skip-invalid", is_flag=True, help="Count and skip malformed records.")
@click.option(
    "--capacity-tokens",
    help="KV pool in tokens (64k, 1.5M, or 'inf' for an unbounded cache). Default: sized from --model on --gpu.",
)
@click.option(
    "--capacity-blocks",
    type=click.IntRange(min=1),
    help="KV pool in vLLM blocks of --vllm-block-size tokens.",
)
@click.option(
    "--model",
    help=f"Model preset, config.json or .gguf: gives KV bytes per token and weights (default with no --capacity-*: {DEFAULT_MODEL}).",
)
@click.option(
    "--gpu",
    help=f"GPU preset or memory size (e.g. 80GiB) to size the pool from (default: {DEFAULT_GPU}).",
)
@click.option(
    "--num-gpus",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="GPUs (tensor parallel).",
)
@click.option(
    "--gpu-util",
    type=click.FloatRange(0.01, 1.0),
    default=DEFAULT_UTILIZATION,
    show_default=True,
    help="Share of GPU memory the engine may use (vLLM --gpu-memory-utilization).",
)
@click.option(
    "--kv-dtype", type=click.Choice(list(KV_DTYPE_BYTES)), default="auto", show_default=True
)
@click.option(
    "--weights-gib", type=click.FloatRange(min=0), help="Override the model's weight size."
)
@click.option(
    "--overhead-gib",
    type=click.FloatRange(min=0),
    help="Per-GPU activations/CUDA-graph reserve [default: 2].",
)
@click.option(
    "--sweep-capacity",
    is_flag=True,
    help="Also replay at a grid of capacities for hit-vs-capacity curves.",
)
@click.option(
    "--sweep-sizes", help="Capacities for the sweep, e.g. 64k,256k,1M (implies --sweep-capacity)."
)
@click.option("--vllm-block-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="vLLM running requests at most.",
)
@click.option("--sglang-page-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--sglang-eviction",
    type=click.Choice([p.value for p in EvictionPolicy]),
    default="lru",
    show_default=True,
)
@click.option(
    "--sglang-schedule",
    type=click.Choice([p.value for p in SchedulePolicy]),
    default="fcfs",
    show_default=True,
)
@click.option(
    "--max-running-requests",
    type=click.IntRange(min=1),
    help="SGLang running requests at most (default: memory bound).",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="llama.cpp slots (-np).",
)
@click.option(
    "--kv-unified/--no-kv-unified",
    default=True,
    show_default=True,
    help="llama.cpp unified KV buffer.",
)
@click.option(
    "--slot-prompt-similarity", type=click.FloatRange(0.0, 1.0), default=0.1, show_default=True
)
@click.option(
    "--cache-reuse",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="llama.cpp KV-shift chunk size (0: off).",
)
@click.option(
    "--cache-ram",
    type=click.IntRange(min=-1),
    default=8192,
    show_default=True,
    help="llama.cpp host prompt cache, MiB (-1: n_ctx tokens, 0: off).",
)
@click.option("--cache-idle-slots/--no-cache-idle-slots", default=True, show_default=True)
@click.option(
    "--rate",
    "rate_per_s",
    type=click.FloatRange(min=0.0001),
    help="Poisson arrivals at this rate instead of the trace's times.",
)
@click.option(
    "--prefill-tps",
    type=click.FloatRange(min=0.001),
    default=8000.0,
    show_default=True,
    help="Service model: prefill tokens/s per request.",
)
@click.option(
    "--decode-tps",
    type=click.FloatRange(min=0.001),
    default=40.0,
    show_default=True,
    help="Service model: decode tokens/s per request.",
)
@click.option(
    "--ignore-trace-times",
    is_flag=True,
    help="Use the service model even where the trace has end times.",
)
@click.option(
    "--default-output",
    type=click.IntRange(min=0),
    default=128,
    show_default=True,
    help="Output tokens when the trace has none.",
)
@click.option(
    "--no-cache-outputs",
    is_flag=True,
    help="Do not cache generated tokens (compare with the prompt-only ideal).",
)
@click.option("--no-ideal", is_flag=True, help="Skip the ideal-cache analysis.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the result as JSON (schema kvroute.simulate/1, docs/simulate-json.md); '-' for stdout.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write a self-contained HTML report with charts.",
)
@click.option(
    "--validate",
    "validate_url",
    metavar="URL",
    help="Serve the trace on this running engine and compare the model with what it cached.",
)
@click.option(
    "--engine",
    "validate_engine",
    type=click.Choice(list(VALIDATE_ENGINES)),
    help="The engine behind --validate (its model is the one checked).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    help="With --validate: a closed loop of N clients instead of the trace's arrival times.",
)
@click.option(
    "--no-reset", is_flag=True, help="With --validate: do not reset the engine's cache first."
)
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary or progress.")
def simulate_cmd(
    trace: Path,
    engines: str,
    format_name: str | None,
    tokenizer: str | None,
    workers: int | None,
    skip_invalid: bool,
    capacity_tokens: str | None,
    capacity_blocks: int | None,
    model: str | None,
    gpu: str | None,
    num_gpus: int,
    gpu_util: float,
    kv_dtype: str,
    weights_gib: float | None,
    overhead_gib: float | None,
    sweep_capacity: bool,
    sweep_sizes: str | None,
    vllm_block_size: int,
    max_num_seqs: int,
    sglang_page_size: int,
    sglang_eviction: str,
    sglang_schedule: str,
    max_running_requests: int | None,
    parallel: int,
    kv_unified: bool,
    slot_prompt_similarity: float,
    cache_reuse: int,
    cache_ram: int,
    cache_idle_slots: bool,
    rate_per_s: float | None,
    prefill_tps: float,
    decode_tps: float,
    ignore_trace_times: bool,
    default_output: int,
    no_cache_outputs: bool,
    no_ideal: bool,
    seed: int,
    json_path: Path | None,
    html_path: Path | None,
    validate_url: str | None,
    validate_engine: str | None,
    concurrency: int | None,
    no_reset: bool,
    quiet: bool,
) -> None:
    """Predict what llama.cpp, vLLM and SGLang would cache on TRACE.

    Replays the trace in time through a model of each engine's prefix cache (requests
    hold memory from start to finish) at one KV capacity, and reports per engine the
    token hit ratio, per-request hits, prefill computed vs saved, evictions and peak
    pinned memory, next to the ideal cache of `kvroute analyze`.

    \b
    Capacity: --capacity-tokens / --capacity-blocks, or sized from --model on --gpu
    (default: llama-3.1-8b on one h100-80gb at 0.9 utilization).
    Timing: the trace's arrival and end times; missing end times come from a service
    model (--prefill-tps, --decode-tps); no arrival times: one request at a time.

    \b
    Validation: --validate URL --engine llamacpp|vllm serves the trace on that engine
    (cache reset first; greedy, max_tokens = each request's output length; at the trace's
    arrival times or --concurrency N), reads its cached tokens per response and from
    /metrics, replays its model with the engine's own settings over that run and reports
    predicted vs measured (docs/simulate-json.md, "validation").
    """
    console = Console(stderr=json_path == Path("-"), quiet=quiet)
    if validate_url is not None or validate_engine is not None:
        if validate_url is None or validate_engine is None:
            raise UsageError("--validate URL and --engine go together")
        if capacity_tokens is not None or capacity_blocks is not None or gpu is not None:
            raise UsageError(
                "with --validate the KV pool is read from the engine; drop --capacity-*/--gpu"
            )
    elif concurrency is not None or no_reset:
        raise UsageError("--concurrency and --no-reset need --validate")
    names = (validate_engine,) if validate_engine is not None else _engines(engines)
    timing = TimingOptions(
        prefill_tokens_per_s=prefill_tps,
        decode_tokens_per_s=decode_tps,
        use_trace_end_times=not ignore_trace_times,
        arrival_rate_per_s=rate_per_s,
        default_output_tokens=default_output,
        seed=seed,
    )
    settings = EngineSettings(
        vllm=VllmConfig(block_size_tokens=vllm_block_size, max_num_seqs=max_num_seqs),
        sglang=SglangConfig(
            page_size=sglang_page_size,
            eviction_policy=EvictionPolicy(sglang_eviction),
            schedule_policy=SchedulePolicy(sglang_schedule),
            max_running_requests=max_running_requests,
        ),
        llamacpp=LlamaCppConfig(
            num_slots=parallel,
            kv_unified=kv_unified,
            slot_prompt_similarity=slot_prompt_similarity,
            cache_reuse=cache_reuse,
            cache_ram_mib=cache_ram,
            cache_idle_slots=cache_idle_slots,
        ),
    )
    validation = None
    if validate_url is not None and validate_engine is not None:
        requests, source, validation = _validate(
            trace,
            format_name,
            tokenizer,
            workers,
            skip_invalid,
            settings,
            (validate_url, validate_engine),
            ValidateOptions(
                concurrency=concurrency, default_output_tokens=default_output, reset=not no_reset
            ),
            console,
        )
        settings = validation.setup.settings
        capacity = capacity_from_tokens(validation.setup.capacity_tokens)
    else:
        capacity = _capacity(
            capacity_tokens,
            capacity_blocks,
            vllm_block_size,
            model,
            gpu,
            num_gpus,
            gpu_util,
            kv_dtype,
            weights_gib,
            overhead_gib,
        )
        requests, source = _load(trace, format_name, tokenizer, workers, skip_invalid, console)
    options = SimulateOptions(
        engines=names,
        settings=settings,
        timing=timing,
        cache_outputs=not no_cache_outputs,
        sweep_capacities=_sizes(sweep_sizes) if sweep_sizes else (),
        auto_sweep=sweep_capacity,
    )
    ideal = None if no_ideal else _ideal(requests, source, vllm_block_size, console)
    with console.status("simulating") as status:
        result = simulate(
            requests,
            capacity,
            source,
            options=options,
            ideal=ideal,
            progress=lambda step: status.update(f"simulating: {step}"),
        )
    if not quiet:
        from kvroute.report.simulate_console import render_console

        render_console(result, console)
        if validation is not None:
            from kvroute.report.simulate_validation import render_validation

            render_validation(validation, console)
    if json_path is not None:
        data = _json(result, validation)
        if json_path == Path("-"):
            click.echo(data.decode(), nl=False)
        else:
            write_atomic(json_path, data)
            console.print(f"wrote {json_path}")
    if html_path is not None:
        from kvroute.report.simulate_page import write_simulation_page

        write_simulation_page(result, html_path, validation=validation)
        console.print(f"wrote {html_path}")


def _load(
    trace: Path,
    format_name: str | None,
    tokenizer: str | None,
    workers: int | None,
    skip_invalid: bool,
    console: Console,
) -> tuple[list[Request], TraceSource]:
    """Read (and tokenize) the whole trace: every engine replays it."""
    fmt_name = format_name or detect_format(trace)
    stats = ReadStats()
    requests = read_trace(
        trace, fmt_name, options=ReadOptions(), skip_invalid=skip_invalid, stats=stats
    )
    first = next(requests)
    stream: Iterator[Request] = chain([first], requests)
    tokenizer_name = None
    if not isinstance(first.prompt, BlockPrompt | TokenPrompt):
        from kvroute.trace.tokenize import tokenize_requests
        from kvroute.trace.tokenizer import load_tokenizer

        tokenizer_name = load_tokenizer(tokenizer).name
        stream = tokenize_requests(stream, tokenizer, workers=workers)
    with console.status(f"reading {trace.name}"):
        loaded = list(stream)
    source = TraceSource(str(trace), fmt_name, tokenizer_name, stats.num_skipped)
    return loaded, source


def _ideal(
    requests: list[Request], source: TraceSource, block_size: int, console: Console
) -> Ideal:
    with console.status("measuring the ideal cache"):
        result = analyze_requests(
            requests,
            trace_path=source.path,
            trace_format=source.format,
            tokenizer_name=source.tokenizer,
            options=AnalyzeOptions(block_size_tokens=block_size),
        )
    ov = result.overlap
    return Ideal(
        granularity=ov.granularity.value,
        hit_ratio=ov.hit_ratio,
        reusable_tokens=ov.reusable_tokens,
        block_size_tokens=ov.block_size_tokens,
        block_hit_ratio=ov.block_hit_ratio,
        block_reusable_tokens=ov.block_reusable_tokens,
    )


def _json(result: SimulationResult, validation: ValidationResult | None) -> bytes:
    opt = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    if validation is None:
        return orjson.dumps(result, option=opt) + b"\n"
    merged = orjson.loads(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY))
    merged["validation"] = validation
    return orjson.dumps(merged, option=opt) + b"\n"


# The command-line option behind each setting an engine record's argv may give.
_OPTION_OF_SETTING = {
    "kv_unified": "kv_unified",
    "cache_ram_mib": "cache_ram",
    "slot_prompt_similarity": "slot_prompt_similarity",
    "cache_reuse": "cache_reuse",
    "cache_idle_slots": "cache_idle_slots",
    "max_num_seqs": "max_num_seqs",
}


def _engine_record(engine: str, url: str) -> EngineRecord | None:
    """The `kvroute engines up` record of the engine at ``url``, if kvroute started it."""
    for record in StateDir(default_state_dir()).records():
        if record.engine == engine and record.base_url.rstrip("/") == url.rstrip("/"):
            return record
    return None


def _given(
    settings: EngineSettings, engine: str, record: EngineRecord | None
) -> tuple[EngineSettings, str]:
    """The settings the engine does not report: options given on the command line, then
    the engine's own command line when kvroute started it (``record``), then defaults.
    Returns them and where they came from, in words."""
    if record is None:
        return settings, (
            "settings the engine does not report are the command-line options (or the "
            "engine's defaults): no `kvroute engines up` record names this URL"
        )
    ctx = click.get_current_context()
    from_argv = {
        key: value
        for key, value in given_from_argv(engine, record.argv).items()
        if key not in _OPTION_OF_SETTING
        or ctx.get_parameter_source(_OPTION_OF_SETTING[key]) is not ParameterSource.COMMANDLINE
    }
    return with_given(settings, engine, from_argv), (
        f"settings the engine does not report come from its command line ({record.name}, "
        "started by `kvroute engines up`) unless given as options"
    )


def _record_model(record: EngineRecord | None) -> str | None:
    """The model an engine was started with (a GGUF or a Hugging Face directory): the
    engine's own tokenizer."""
    argv = list(record.argv) if record is not None else []
    for flag, value in itertools.pairwise(argv):
        if flag in ("--model", "-m") and Path(value).exists():
            return value
    return None


def _validate(
    trace: Path,
    format_name: str | None,
    tokenizer: str | None,
    workers: int | None,
    skip_invalid: bool,
    settings: EngineSettings,
    target: tuple[str, str],
    options: ValidateOptions,
    console: Console,
) -> tuple[list[Request], TraceSource, ValidationResult]:
    """Read the trace as it is (the engine gets chat or completions requests), tokenize a
    copy for the model, serve it on the engine and compare. Returns the run as it happened
    (token prompts, times, outputs), what to simulate next."""
    url, engine = target
    record = _engine_record(engine, url)
    given, where = _given(settings, engine, record)
    tokenizer = tokenizer or _record_model(record)
    fmt_name = format_name or detect_format(trace)
    stats = ReadStats()
    with console.status(f"reading {trace.name}"):
        originals = list(
            read_trace(
                trace, fmt_name, options=ReadOptions(), skip_invalid=skip_invalid, stats=stats
            )
        )
        tokenizer_name = None
        tokenized = originals
        if any(isinstance(r.prompt, ChatPrompt | TextPrompt) for r in originals):
            from kvroute.trace.tokenize import tokenize_requests
            from kvroute.trace.tokenizer import load_tokenizer

            tokenizer_name = load_tokenizer(tokenizer).name
            tokenized = list(tokenize_requests(originals, tokenizer, workers=workers))
    prompt_ids = []
    for r in tokenized:
        if not isinstance(r.prompt, TokenPrompt):
            raise InputError(
                "a hash-only trace cannot be served to an engine",
                path=str(trace),
                line=r.source_line,
            )
        prompt_ids.append(r.prompt.token_ids)

    async def run() -> tuple[ValidationResult, Prediction]:
        async with httpx.AsyncClient() as client:
            adapter = make_adapter(engine, url, client=client)
            post = http_post(client, url, timeout_s=options.request_timeout_s)
            return await validate(originals, prompt_ids, adapter, post, given, options=options)

    with console.status(f"serving {len(originals):,} requests on {engine} at {url}"):
        validation, prediction = asyncio.run(run())
    validation = dataclasses.replace(validation, notes=[*validation.notes, where])
    source = TraceSource(str(trace), fmt_name, tokenizer_name, stats.num_skipped)
    return prediction.requests, source, validation
