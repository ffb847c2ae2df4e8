"""``kvroute simulate``: the trace, read and tokenized once for every engine, and its ideal cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kvroute.cache.result import Ideal
from kvroute.cache.simulate import TraceSource
from kvroute.cli.trace_input import TraceInput
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.io import ReadStats
from kvroute.trace.readers import detect_format, read_trace
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt


def load_trace(
    given: TraceInput | Path,
    format_name: str | None,
    tokenizer: str | None,
    workers: int | None,
    skip_invalid: bool,
    console: Console,
    *,
    tap: Callable[[Request], None] | None = None,
) -> tuple[list[Request], TraceSource]:
    """Read (and tokenize) the whole trace: every engine replays it. A plain path is
    named as given; ``-`` needs :func:`kvroute.cli.trace_input.open_trace` first.
    ``tap`` sees each request as read, before its prompt is tokenized (advise labels
    chat requests by their messages)."""
    if isinstance(given, Path):
        given = TraceInput(given, str(given))
    trace = given.path
    fmt_name = format_name or detect_format(trace)
    stats = ReadStats()
    requests = read_trace(
        trace, fmt_name, options=ReadOptions(), skip_invalid=skip_invalid, stats=stats
    )
    first = next(requests)
    stream: Iterator[Request] = chain([first], requests)
    if tap is not None:
        stream = _tapped(stream, tap)
    tokenizer_name = None
    if not isinstance(first.prompt, BlockPrompt | TokenPrompt):
        from kvroute.trace.tokenize import tokenize_requests
        from kvroute.trace.tokenizer import load_tokenizer

        tokenizer_name = load_tokenizer(tokenizer).name
        stream = tokenize_requests(stream, tokenizer, workers=workers)
    with console.status(f"reading {Path(given.name).name}"):
        loaded = list(stream)
    source = TraceSource(given.name, fmt_name, tokenizer_name, stats.num_skipped)
    skipped = stats.skipped_text(str(trace), given.name)
    if skipped is not None:
        console.print(f"[yellow]{escape(skipped)}[/]")
    return loaded, source


def _tapped(stream: Iterator[Request], tap: Callable[[Request], None]) -> Iterator[Request]:
    for request in stream:
        tap(request)
        yield request


def ideal_cache(
    requests: list[Request], source: TraceSource, block_size: int, console: Console
) -> Ideal:
    from kvroute.analyze.run import AnalyzeOptions, analyze_requests  # only when asked for

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
