"""``kvroute simulate``: replay a trace through the llama.cpp, vLLM and SGLang cache models.

The command reads its options (``options``), sizes the pool (``capacity``), reads the
trace (``trace``) or serves it on a real engine (``validate``), runs
:func:`kvroute.cache.simulate.simulate` and writes the results (``output``).
"""

from __future__ import annotations

from pathlib import Path

import click

from kvroute import _accel
from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy, SglangConfig
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings
from kvroute.cache.replay.timing import TimingOptions
from kvroute.cache.simulate import SimulateOptions, simulate
from kvroute.cli.console import make_console
from kvroute.cli.files import check_outputs, writes_stdout
from kvroute.cli.simulate.capacity import parse_engines, parse_sizes, resolve_capacity
from kvroute.cli.simulate.options import simulate_options
from kvroute.cli.simulate.output import write_outputs
from kvroute.cli.simulate.trace import ideal_cache, load_trace
from kvroute.cli.trace_input import open_trace, trace_inputs
from kvroute.errors import UsageError
from kvroute.validate.result import ValidateOptions

SLOW_HINT_REQUESTS = 100_000
"""Traces this long get a note when the compiled replay is not in use."""


@click.command("simulate")
@simulate_options
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
    latency: bool,
    quiet: bool,
) -> None:
    """Predict what llama.cpp, vLLM and SGLang would cache on TRACE.

    Replays the trace in time through a model of each engine's prefix cache (requests
    hold memory from start to finish) at one KV capacity, and reports per engine the
    token hit ratio, per-request hits, prefill computed vs saved, evictions and peak
    pinned memory, next to the ideal cache of `kvroute analyze`.

    TRACE is read as by `kvroute analyze` ('-': standard input).

    \b
    Capacity: --capacity-tokens / --capacity-blocks, or sized from --model on --gpu
    (default: llama-3.1-8b on one h100-80gb at 0.9 utilization). 64k is 64,000
    tokens, 64Ki is 65,536; capacities print the same way.
    Timing: the trace's arrival and end times; missing end times come from a service
    model (--prefill-tps, --decode-tps); no arrival times: one request at a time.

    \b
    Validation: --validate URL --engine llamacpp|vllm|sglang serves the trace on that engine
    (cache reset first; greedy, max_tokens = each request's output length; at the trace's
    arrival times or --concurrency N), reads its cached tokens per response and from
    /metrics, replays its model with the engine's own settings over that run and reports
    predicted vs measured (docs/simulate-json.md, "validation").
    """
    check_outputs({"--json": json_path, "--html": html_path}, inputs=trace_inputs(trace))
    console = make_console(stderr=writes_stdout(json_path, html_path), quiet=quiet)
    if validate_url is not None or validate_engine is not None:
        if validate_url is None or validate_engine is None:
            raise UsageError("--validate URL and --engine go together")
        if capacity_tokens is not None or capacity_blocks is not None or gpu is not None:
            raise UsageError(
                "with --validate the KV pool is read from the engine; drop --capacity-*/--gpu"
            )
        if latency:
            raise UsageError("--latency predicts on --model/--gpu; it does not go with --validate")
    elif concurrency is not None or no_reset:
        raise UsageError("--concurrency and --no-reset need --validate")
    names = (validate_engine,) if validate_engine is not None else parse_engines(engines)
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
        # Imported here: validation's HTTP client and engine adapters cost a plain
        # simulate a third of a second of start-up.
        from kvroute.cli.simulate.validate import run_validation

        with open_trace(trace) as given:
            requests, source, validation = run_validation(
                given,
                format_name,
                tokenizer,
                workers,
                skip_invalid,
                settings,
                (validate_url, validate_engine),
                ValidateOptions(
                    concurrency=concurrency,
                    default_output_tokens=default_output,
                    reset=not no_reset,
                ),
                console,
            )
        settings = validation.setup.settings
        capacity = capacity_from_tokens(validation.setup.capacity_tokens)
    else:
        capacity = resolve_capacity(
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
        with open_trace(trace) as given:
            requests, source = load_trace(
                given, format_name, tokenizer, workers, skip_invalid, console
            )
    options = SimulateOptions(
        engines=names,
        settings=settings,
        timing=timing,
        cache_outputs=not no_cache_outputs,
        sweep_capacities=parse_sizes(sweep_sizes) if sweep_sizes else (),
        auto_sweep=sweep_capacity,
    )
    ideal = None if no_ideal else ideal_cache(requests, source, vllm_block_size, console)
    if len(requests) >= SLOW_HINT_REQUESTS and not _accel.active("cache"):
        console.print(
            f"[dim]note: replaying with the Python sources ({_accel.status('cache')[1]}); "
            "the compiled build is about twice as fast[/dim]"
        )
    with console.status("simulating") as status:
        result = simulate(
            requests,
            capacity,
            source,
            options=options,
            ideal=ideal,
            progress=lambda step: status.update(f"simulating: {step}"),
        )
    latency_preds = None
    if latency:
        from kvroute.cli.simulate.latency import latency_predictions

        with console.status("predicting latency"):
            latency_preds = latency_predictions(
                requests,
                names,
                model=model,
                gpu=gpu,
                num_gpus=num_gpus,
                kv_dtype=kv_dtype,
                capacity_tokens=capacity.tokens,
                settings=settings,
                rate_per_s=rate_per_s,
                seed=seed,
            )
    write_outputs(
        result,
        validation,
        console,
        json_path=json_path,
        html_path=html_path,
        quiet=quiet,
        latency=latency_preds,
    )
