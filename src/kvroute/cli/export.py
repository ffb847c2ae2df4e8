"""``kvroute export``: an anonymized, hash-only copy of a trace, keyed by a secret.

A text log is rendered with the chat template and tokenized as ``kvroute analyze`` does,
then written as chained block hashes passed through a keyed function
(:func:`kvroute.trace.hashing.keyed_hashes`); no text leaves. The key lives in a key
file, created on first use (32 random bytes, hex, readable by its owner only); the
file's header (kvroute layout) or each record (Mooncake layout) names the key's id, so
two exports compare only when both were made with the same key.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import click

from kvroute.cli.files import check_outputs
from kvroute.cli.trace_input import open_trace, trace_inputs
from kvroute.errors import UsageError
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.hashing import key_id
from kvroute.trace.io import ReadStats
from kvroute.trace.keys import default_key_file, load_or_create_key
from kvroute.trace.readers import detect_format, read_trace, trace_formats
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt
from kvroute.trace.writer import Layout, TraceWriter


@click.command("export")
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--to",
    "layout",
    type=click.Choice([x.value for x in Layout]),
    default=Layout.KVROUTE.value,
    show_default=True,
    help="kvroute: header line with the key id, then kvroute records; mooncake: Mooncake "
    "records (timestamp ms, input_length, output_length, hash_ids) with key_id in each.",
)
@click.option(
    "--key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The secret key (hex); created on first use. Default: $XDG_CONFIG_HOME/kvroute/trace.key.",
)
@click.option(
    "--format",
    "format_name",
    type=click.Choice(trace_formats().names()),
    help="Force the input format (default: detected).",
)
@click.option("--tokenizer", help="A .gguf file or a Hugging Face tokenizer directory.")
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    help="Tokens per block [default: 16; a hash-only trace keeps its own].",
)
@click.option("--workers", type=click.IntRange(min=1), help="Tokenizer processes.")
@click.option("--skip-invalid", is_flag=True, help="Count and skip malformed records.")
def export_cmd(
    trace: Path,
    out: Path,
    layout: str,
    key_file: Path | None,
    format_name: str | None,
    tokenizer: str | None,
    block_size: int | None,
    workers: int | None,
    skip_invalid: bool,
) -> None:
    """Write OUT, an anonymized hash-only copy of TRACE keyed by a secret key file."""
    if str(out) == "-":
        raise UsageError("kvroute export writes a file: give OUT a path")
    check_outputs({"OUT": out}, inputs=trace_inputs(trace))
    key_path = key_file or default_key_file()
    key, created = load_or_create_key(key_path)
    if created:
        click.echo(f"created key file {key_path} (key id {key_id(key)})", err=True)
    stats = ReadStats()
    with open_trace(trace) as source:
        fmt = format_name or detect_format(source.path)
        hash_only = fmt in ("mooncake", "bailian", "kvroute")
        requests = read_trace(
            source.path,
            fmt,
            options=ReadOptions(block_size_tokens=block_size if hash_only else None),
            skip_invalid=skip_invalid,
            stats=stats,
        )
        first = next(requests)
        stream: Iterator[Request] = chain([first], requests)
        size = block_size or 16
        if isinstance(first.prompt, BlockPrompt):
            size = first.prompt.block_size_tokens
        elif not isinstance(first.prompt, TokenPrompt):
            from kvroute.trace.tokenize import tokenize_requests

            stream = tokenize_requests(stream, tokenizer, workers=workers)
        with TraceWriter(out, block_size_tokens=size, key=key, layout=Layout(layout)) as writer:
            for r in stream:
                writer.append(r)
    skipped = f", {stats.num_skipped:,} invalid skipped" if stats.num_skipped else ""
    click.echo(
        f"wrote {writer.num_written:,} requests to {out} ({layout}, {size}-token blocks, "
        f"key id {key_id(key)}{skipped})",
        err=True,
    )
