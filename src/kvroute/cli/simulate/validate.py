"""``kvroute simulate --validate``: serve the trace on a running engine and check its model.

The engine's settings it does not report come from the command line, else from the
engine's own command line when `kvroute engines up` started it (its state record)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from pathlib import Path

import click
import httpx
from click.core import ParameterSource
from rich.console import Console

from kvroute.cache.registry import EngineSettings
from kvroute.cache.simulate import TraceSource
from kvroute.cli.trace_input import TraceInput
from kvroute.engines.registry import make_adapter
from kvroute.engines.state import EngineRecord, StateDir, default_state_dir
from kvroute.errors import InputError
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.io import ReadStats
from kvroute.trace.readers import detect_format, read_trace
from kvroute.trace.records import ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.validate.predict import ModelReplay
from kvroute.validate.result import ValidateOptions, ValidationResult
from kvroute.validate.run import validate
from kvroute.validate.serve import http_post
from kvroute.validate.settings import given_from_argv, with_given

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
    """The model an engine was started with (a GGUF or a Hugging Face directory; SGLang's
    flag is ``--model-path``): the engine's own tokenizer."""
    argv = list(record.argv) if record is not None else []
    for flag, value in itertools.pairwise(argv):
        if flag in ("--model", "-m", "--model-path") and Path(value).exists():
            return value
    return None


def run_validation(
    trace_in: TraceInput,
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
    trace = trace_in.path
    record = _engine_record(engine, url)
    given, where = _given(settings, engine, record)
    tokenizer = tokenizer or _record_model(record)
    fmt_name = format_name or detect_format(trace)
    stats = ReadStats()
    with console.status(f"reading {Path(trace_in.name).name}"):
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

    async def run() -> tuple[ValidationResult, ModelReplay]:
        async with httpx.AsyncClient() as client:
            adapter = make_adapter(engine, url, client=client)
            post = http_post(client, url, timeout_s=options.request_timeout_s)
            return await validate(originals, prompt_ids, adapter, post, given, options=options)

    with console.status(f"serving {len(originals):,} requests on {engine} at {url}"):
        validation, prediction = asyncio.run(run())
    validation = dataclasses.replace(validation, notes=[*validation.notes, where])
    source = TraceSource(trace_in.name, fmt_name, tokenizer_name, stats.num_skipped)
    return prediction.requests, source, validation
