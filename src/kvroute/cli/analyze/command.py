"""``kvroute analyze`` and ``kvroute sample``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path

import click
import orjson
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from kvroute.analyze.result import AnalysisResult
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.analyze.warmup import parse_warmup
from kvroute.cli.analyze.breakers import KeptPrompts, find_breakers
from kvroute.cli.analyze.labels import ClassLabels
from kvroute.cli.analyze.pool import pool_options, resolve_pool
from kvroute.cli.console import make_console
from kvroute.cli.files import STDOUT, check_outputs, emit, emit_page, writes_stdout
from kvroute.cli.trace_input import TraceInput, open_trace, trace_inputs
from kvroute.report import fmt
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.io import ReadStats
from kvroute.trace.readers import detect_format, read_trace, trace_formats
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt

EXIT_BELOW_THRESHOLD = 6
"""Exit status of ``--fail-under`` when the prefix overlap is below the threshold."""


@click.command("analyze")
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--format",
    "format_name",
    type=click.Choice(trace_formats().names()),
    help="Force the trace format (default: detected from the first record).",
)
@click.option(
    "--tokenizer",
    help="A .gguf file or a Hugging Face tokenizer directory (default: the SmolLM2-135M-Instruct GGUF from scripts/install-engines).",
)
@click.option(
    "--block-size",
    "block_size",
    type=click.IntRange(min=1),
    default=None,
    help="Tokens per block of the vLLM-style figures [default: 16]. A hash-only trace "
    "(mooncake, kvroute hashes) keeps the block size it was hashed with (Mooncake: 512) "
    "unless this says otherwise.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the full result as JSON (schema kvroute.analyze/1, see docs/analyze-json.md). '-' for stdout.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write a self-contained HTML report with charts. '-' for stdout.",
)
@click.option(
    "--no-text", is_flag=True, help="Keep prompt text out of every output (no prefix previews)."
)
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Count and skip malformed records instead of stopping at the first.",
)
@click.option(
    "--top",
    "top_groups",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many shared-prefix groups to report.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Tokenizer processes. Default: one process (it already encodes on every core) on "
    "fewer than 4 cores or for the first 4,096 requests; past them, on 4 or more cores, a "
    "pool of one per core but one.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for the pairwise sample."
)
@click.option(
    "--warmup",
    "warmup_text",
    help="Leave the first requests out of the headline overlap, measuring the steady "
    "state: a share of requests (50%) or a duration from the first arrival (10m, 600s). "
    "They still fill the cache; the figure from an empty cache is shown too.",
)
@click.option(
    "--no-breakers",
    is_flag=True,
    help="Skip the cache-breaker pass (per-request content inside shared prefixes).",
)
@pool_options
@click.option(
    "--fail-under",
    "fail_under",
    type=click.FloatRange(min=0, max=100),
    help=f"Exit {EXIT_BELOW_THRESHOLD} when the prefix overlap (the headline figure) is "
    "below this percentage, after writing every report: for CI on prompt changes.",
)
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary or progress bar.")
def analyze_cmd(
    trace: Path,
    format_name: str | None,
    tokenizer: str | None,
    block_size: int | None,
    json_path: Path | None,
    html_path: Path | None,
    no_text: bool,
    skip_invalid: bool,
    top_groups: int,
    workers: int | None,
    seed: int,
    warmup_text: str | None,
    no_breakers: bool,
    capacity_text: str | None,
    model: str | None,
    gpu: str | None,
    num_gpus: int,
    gpu_util: float,
    kv_dtype: str,
    fail_under: float | None,
    quiet: bool,
) -> None:
    """Measure how much of TRACE's prompts share a prefix, and how long.

    TRACE is an OpenAI request log (JSONL), ShareGPT conversations (JSON/JSONL), a
    Mooncake trace or a kvroute capture; ``.gz`` works too, and ``-`` reads the trace
    from standard input (``zcat log.jsonl.gz | kvroute analyze -``). Chat requests are rendered
    with the model's chat template and tokenized as the engine would see them.

    \b
    Figures (all defined in README.md):
      prefix overlap    share of prompt tokens that repeat a prefix seen earlier
                        (the ideal, infinite-cache hit ratio), token level and at
                        --block-size blocks
      LCP               per request, longest common prefix with any earlier request
      shared prefixes   the prefixes that save the most prefill
      reuse distance    ideal LRU hit ratio vs KV cache capacity
    """
    check_outputs({"--json": json_path, "--html": html_path}, inputs=trace_inputs(trace))
    pool = resolve_pool(
        capacity_text, model, gpu, num_gpus=num_gpus, gpu_util=gpu_util, kv_dtype=kv_dtype
    )
    console = make_console(stderr=writes_stdout(json_path, html_path))
    stats = ReadStats()
    with open_trace(trace) as source:
        result = _analyze(
            source,
            stats,
            format_name=format_name,
            tokenizer=tokenizer,
            block_size=block_size,
            options=AnalyzeOptions(
                top_groups=top_groups,
                seed=seed,
                warmup=parse_warmup(warmup_text) if warmup_text is not None else None,
                pool_tokens=pool.tokens if pool.given else None,
                pool_sized_from=pool.sized_from,
            ),
            skip_invalid=skip_invalid,
            with_text=not no_text,
            workers=workers,
            console=console if not quiet else None,
            breakers=None if no_breakers else BreakerOptions(pool.tokens),
        )
        skipped = stats.skipped_text(str(source.path), source.name)
    _warn_tokenizer_mismatch(result)
    if not quiet:
        from kvroute.report.analyze.console import render_console

        render_console(result, console, show_text=not no_text)
        if skipped is not None:
            console.print(f"[yellow]{escape(skipped)}[/]")
    if json_path is not None:
        data = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        emit(json_path, data)
        if json_path != STDOUT and not quiet:
            console.print(f"wrote {json_path}")
    if html_path is not None:
        from kvroute.report.analyze.page import analysis_page

        emit_page(html_path, analysis_page(result, datetime.now(UTC)))
        if html_path != STDOUT and not quiet:
            console.print(f"wrote {html_path}")
    if fail_under is not None and result.overlap.hit_ratio * 100 < fail_under:
        found = len(result.breakers.findings) if result.breakers is not None else 0
        click.secho(
            f"fail-under: prefix overlap {fmt.percent(result.overlap.hit_ratio)} is below "
            f"{fail_under:g} %"
            + (f"; {found} cache breaker(s) found, see the report" if found else ""),
            fg="red",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_BELOW_THRESHOLD)


def _warn_tokenizer_mismatch(result: AnalysisResult) -> None:
    """One line on stderr when the trace's requests name models the tokenizer does not
    plausibly belong to (the JSON and HTML carry the same warning)."""
    warning = result.trace.tokenizer_warning
    if warning is not None:
        click.secho(f"warning: {warning}", fg="yellow", err=True)


def _analyze(
    source: TraceInput,
    stats: ReadStats,
    *,
    format_name: str | None,
    tokenizer: str | None,
    block_size: int | None,
    options: AnalyzeOptions,
    skip_invalid: bool,
    with_text: bool,
    workers: int | None,
    console: Console | None,
    breakers: BreakerOptions | None,
) -> AnalysisResult:
    """Read, tokenize (unless the trace holds tokens or hashes) and analyze the trace,
    with a progress bar on ``console``; ``stats`` counts what was read and skipped.
    With ``breakers``, the first requests' text is kept and searched for cache breakers."""
    trace = source.path
    fmt_name = format_name or detect_format(trace)
    requests = read_trace(
        trace,
        fmt_name,
        options=ReadOptions(
            block_size_tokens=block_size if fmt_name in ("mooncake", "bailian", "kvroute") else None
        ),
        skip_invalid=skip_invalid,
        stats=stats,
    )
    first = next(requests)
    tok = None
    stream: Iterator[Request] = chain([first], requests)
    kept = KeptPrompts() if breakers is not None else None
    classes = ClassLabels()
    stream = classes.wrap(stream)
    if not isinstance(first.prompt, BlockPrompt | TokenPrompt):
        from kvroute.trace.tokenize import tokenize_requests
        from kvroute.trace.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
        if kept is not None:
            stream = kept.raw(stream)
        stream = tokenize_requests(stream, tokenizer, workers=workers)
        if kept is not None:
            stream = kept.tokens(stream)
    size = trace.stat().st_size if trace.suffix != ".gz" else None
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]} requests"),
        TimeElapsedColumn(),
        console=console,
        disable=console is None,
        transient=True,
    )
    with progress:
        task = progress.add_task(f"analyzing {Path(source.name).name}", total=size, done=0)

        def on_progress(done: int) -> None:
            progress.update(task, completed=stats.bytes_read if size else None, done=f"{done:,}")

        if block_size is not None:
            options = dataclasses.replace(options, block_size_tokens=block_size)
        result = analyze_requests(
            stream,
            trace_path=source.name,
            trace_format=fmt_name,
            tokenizer_name=None if tok is None else tok.name,
            options=options,
            num_skipped=lambda: stats.num_skipped,
            decode=tok.decode if with_text and tok is not None else None,
            progress=on_progress,
            labels={"class": classes.labels},
        )
    if kept is None or tok is None or breakers is None:
        return result
    with _status(console, "looking for cache breakers"):
        found = find_breakers(
            kept,
            tok,
            block_size_tokens=options.block_size_tokens,
            capacity_tokens=breakers.capacity_tokens,
            with_text=with_text,
        )
    return dataclasses.replace(result, breakers=found)


@dataclasses.dataclass(frozen=True, slots=True)
class BreakerOptions:
    capacity_tokens: int | None
    """KV pool of the per-engine figures (``None``: ideal figures only)."""


def _status(console: Console | None, what: str) -> AbstractContextManager[object]:
    return console.status(what) if console is not None else nullcontext()


@click.command("sample")
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "-n",
    "--num-requests",
    type=click.IntRange(min=1),
    default=600,
    show_default=True,
    help="Requests in the sample log.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the sample's traffic."
)
@click.option(
    "--rate",
    "rate_per_s",
    type=click.FloatRange(min=0.001),
    default=4.0,
    show_default=True,
    help="Mean arrivals per second (Poisson).",
)
def sample_cmd(out: Path, num_requests: int, seed: int, rate_per_s: float) -> None:
    """Write a deterministic sample OpenAI request log to OUT ('-' for stdout): agent
    sessions with tools, RAG, one-off questions, code completion, to try analyze
    without data."""
    from kvroute.trace.synthetic import sample_log

    check_outputs({"OUT": out})
    data = b"".join(
        orjson.dumps(r) + b"\n" for r in sample_log(num_requests, seed=seed, rate_per_s=rate_per_s)
    )
    emit(out, data)
    click.echo(
        f"wrote {num_requests:,} requests to {'stdout' if out == STDOUT else out}",
        err=writes_stdout(out),
    )
