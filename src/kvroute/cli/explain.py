"""``kvroute explain TRACE --request N``: one request's reuse, from which earlier
request, which segments of its prompt, and what each engine model would have kept."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import click
import orjson

from kvroute.analyze.explain import EngineKept, Explanation, Units, explain_request
from kvroute.cache.base import CacheGeometry
from kvroute.cache.capacity import parse_size
from kvroute.cache.registry import cache_models
from kvroute.cache.replay.loop import replay
from kvroute.cache.replay.seq import trace_block_size
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.cli.files import STDOUT, check_outputs, emit
from kvroute.cli.trace_input import open_trace, trace_inputs
from kvroute.errors import UsageError
from kvroute.report import fmt
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.readers import detect_format, read_trace, trace_formats
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TokenPrompt
from kvroute.trace.tokenizer import ChatTokenizer
from kvroute.types import TokenIds

ENGINES = ("llamacpp", "vllm", "sglang")
PREVIEW_CHARS = 60


def _segments(
    request: Request, tokenizer: ChatTokenizer, total: int, with_text: bool, ids: TokenIds
) -> list[tuple[str, int, str | None]]:
    """(field, end token, preview) per message as the chat template renders them, then
    the generation prompt; one ``prompt`` segment for other prompts."""
    p = request.prompt
    if not isinstance(p, ChatPrompt):
        return [("prompt", total, None)]
    out: list[tuple[str, int, str | None]] = []
    start = 0
    for i, m in enumerate(p.messages):
        text = tokenizer.render_chat(p.messages[: i + 1], p.tools, add_generation_prompt=False)
        end = min(int(tokenizer.encode(text).shape[0]), total)
        preview = None
        if with_text and end > start:
            preview = " ".join(tokenizer.decode(ids[start:end]).split())[:PREVIEW_CHARS]
        out.append((f"messages[{i}] ({m.get('role', '?')})", end, preview))
        start = max(start, end)
    out.append(("generation prompt", total, None))
    return out


def _engines(requests: list[Request], capacity_tokens: int | None) -> list[EngineKept]:
    """Each engine model replayed on ``requests``; what it had cached for the last."""
    block = trace_block_size(requests[0])
    timing = TimingOptions()
    schedule = plan(requests, timing)
    registry = cache_models()
    kept = []
    for name in ENGINES:
        model = registry.get(name)(CacheGeometry(capacity_tokens, block, None))
        outcome = replay(requests, model, schedule, timing)
        kept.append(EngineKept(name, int(outcome.cached_tokens[-1])))
    return kept


@click.command("explain")
@click.argument("trace", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--request",
    "number",
    type=click.IntRange(min=1),
    required=True,
    help="Which request: its number in trace order, counting from 1.",
)
@click.option("--format", "format_name", type=click.Choice(trace_formats().names()))
@click.option("--tokenizer", help="A .gguf file or a Hugging Face tokenizer directory.")
@click.option(
    "--capacity-tokens",
    "capacity_text",
    default="256Ki",
    show_default=True,
    help="KV pool of the engine replays ('none': no replay).",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--no-text", is_flag=True, help="No prompt text in the output.")
def explain_cmd(
    trace: Path,
    number: int,
    format_name: str | None,
    tokenizer: str | None,
    capacity_text: str,
    json_path: Path | None,
    no_text: bool,
) -> None:
    """Explain one request's prefix reuse: the earlier request it shares most with, each
    message's reused tokens and the request that first held them, and what llama.cpp,
    vLLM and SGLang would have had cached for it."""
    check_outputs({"--json": json_path}, inputs=trace_inputs(trace))
    capacity = None if capacity_text.lower() == "none" else parse_size(capacity_text)
    with open_trace(trace) as source:
        fmt_name = format_name or detect_format(source.path)
        raw = list(islice(read_trace(source.path, fmt_name, options=ReadOptions()), number))
    if len(raw) < number:
        raise UsageError(f"--request {number}: the trace has {len(raw):,} requests")
    tok = None
    requests = raw
    if not isinstance(raw[0].prompt, BlockPrompt | TokenPrompt):
        from kvroute.trace.tokenize import tokenize_requests
        from kvroute.trace.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
        requests = list(tokenize_requests(raw, tokenizer, workers=1))
    ids = [_ids(r) for r in requests]
    me = requests[-1]
    total = int(ids[-1].shape[0])
    segments: list[tuple[str, int, str | None]] = [("prompt", total, None)]
    if tok is not None and isinstance(me.prompt, TokenPrompt):
        segments = _segments(raw[-1], tok, total, not no_text, me.prompt.token_ids)
    result = explain_request(
        ids,
        number - 1,
        sessions=[r.session_id for r in requests],
        source_line=me.source_line,
        segments=segments,
        capacity_tokens=capacity,
        engines=_engines(requests, capacity) if capacity_text.lower() != "none" else (),
    )
    if json_path is not None:
        emit(json_path, orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    if json_path != STDOUT:
        _print(result)


def _ids(r: Request) -> Units:
    """Token ids, or block hashes standing in for them (hash-only traces compare whole
    blocks: each hash counts for its block's tokens in the figures below)."""
    p = r.prompt
    if isinstance(p, TokenPrompt):
        return p.token_ids
    if isinstance(p, BlockPrompt):
        return p.block_hashes.repeat(p.block_size_tokens)[: p.num_tokens]
    raise UsageError("the trace's prompts are neither text, tokens nor block hashes")


def _req(i: int | None) -> str:
    return "none" if i is None else f"request {i + 1}"


def _print(e: Explanation) -> None:
    line = f", line {e.source_line}" if e.source_line is not None else ""
    session = f", conversation {e.session_id}" if e.session_id else ""
    share = e.reused_tokens / e.prompt_tokens if e.prompt_tokens else 0.0
    click.echo(
        f"request {e.request + 1}{line}{session}: {fmt.count(e.prompt_tokens)} prompt tokens, "
        f"{fmt.count(e.reused_tokens)} ({fmt.percent(share)}) shared with earlier requests"
    )
    if e.best_match is not None:
        same = " (same conversation)" if e.best_match_same_conversation else ""
        click.echo(
            f"  longest shared prefix: {_req(e.best_match)}{same}; first held by "
            f"{_req(e.first_holder)}"
        )
    for s in e.segments:
        click.echo(
            f"  {s.field:24s} tokens {s.start_tokens:>6,}-{s.end_tokens:<6,} reused "
            f"{s.reused_tokens:>6,}  from {_req(s.source_request)}"
            + (f"  “{s.preview}”" if s.preview else "")
        )
    if e.engines:
        kept = ", ".join(f"{k.engine} {fmt.count(k.cached_tokens)}" for k in e.engines)
        click.echo(
            f"  cached for it at {fmt.capacity(e.capacity_tokens or 0)} tokens: {kept} "
            "(engines also cache generated tokens, which a follow-up turn repeats)"
        )
