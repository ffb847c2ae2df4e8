"""``kvroute analyze`` and ``kvroute sample``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
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
from kvroute.cli.console import make_console
from kvroute.cli.files import STDOUT, check_outputs, emit, emit_page, writes_stdout
from kvroute.cli.trace_input import TraceInput, open_trace, trace_inputs
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.io import ReadStats
from kvroute.trace.readers import detect_format, read_trace, trace_formats
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt


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
    "--workers", type=click.IntRange(min=1), help="Tokenizer processes (default: all cores)."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for the pairwise sample."
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
    console = make_console(stderr=writes_stdout(json_path, html_path))
    stats = ReadStats()
    with open_trace(trace) as source:
        result = _analyze(
            source,
            stats,
            format_name=format_name,
            tokenizer=tokenizer,
            block_size=block_size,
            options=AnalyzeOptions(top_groups=top_groups, seed=seed),
            skip_invalid=skip_invalid,
            with_text=not no_text,
            workers=workers,
            console=console if not quiet else None,
        )
        skipped = stats.skipped_text(str(source.path), source.name)
    _warn_tokenizer_mismatch(result)
    if not quiet:
        from kvroute.report.analyze_console import render_console

        render_console(result, console, show_text=not no_text)
        if skipped is not None:
            console.print(f"[yellow]{escape(skipped)}[/]")
    if json_path is not None:
        data = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        emit(json_path, data)
        if json_path != STDOUT and not quiet:
            console.print(f"wrote {json_path}")
    if html_path is not None:
        from kvroute.report.analyze_page import analysis_page

        emit_page(html_path, analysis_page(result, datetime.now(UTC)))
        if html_path != STDOUT and not quiet:
            console.print(f"wrote {html_path}")


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
) -> AnalysisResult:
    """Read, tokenize (unless the trace holds tokens or hashes) and analyze the trace,
    with a progress bar on ``console``; ``stats`` counts what was read and skipped."""
    trace = source.path
    fmt_name = format_name or detect_format(trace)
    requests = read_trace(
        trace,
        fmt_name,
        options=ReadOptions(
            block_size_tokens=block_size if fmt_name in ("mooncake", "kvroute") else None
        ),
        skip_invalid=skip_invalid,
        stats=stats,
    )
    first = next(requests)
    tok = None
    stream: Iterator[Request] = chain([first], requests)
    if not isinstance(first.prompt, BlockPrompt | TokenPrompt):
        from kvroute.trace.tokenize import tokenize_requests
        from kvroute.trace.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
        stream = tokenize_requests(stream, tokenizer, workers=workers)
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
        return analyze_requests(
            stream,
            trace_path=source.name,
            trace_format=fmt_name,
            tokenizer_name=None if tok is None else tok.name,
            options=options,
            num_skipped=lambda: stats.num_skipped,
            decode=tok.decode if with_text and tok is not None else None,
            progress=on_progress,
        )


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
