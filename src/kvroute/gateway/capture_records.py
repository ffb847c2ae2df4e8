"""Capture's records: what the request path hands over (:class:`CaptureEvent`, cheap
references) and the kvroute trace record each event becomes on the worker thread
(tokenized, hashed in one vectorised pass per batch, session ids pseudonymised, no text
unless asked). Pure apart from the tokenizer's memo; :mod:`kvroute.gateway.capture`
runs the worker and the files."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvroute.errors import KvrouteError
from kvroute.gateway.prompt_tokens import PromptTokens
from kvroute.gateway.types import Request
from kvroute.trace.formats.base import ReadOptions, RecordError
from kvroute.trace.formats.openai_log import OpenAILogFormat, structured_output_kind
from kvroute.trace.hashing import (
    DEFAULT_SEED,
    block_contents,
    chain_hashes_batch,
    extend_chain,
)
from kvroute.trace.records import RequestAttrs, StructuredOutput, TokenPrompt
from kvroute.types import TokenIds

# Keys OpenAILogFormat reads beyond messages and tools (a wrapped body, a response,
# times, ids), any of which may make it reject the record: bodies with one take the
# format's full parser, so capture accepts and refuses exactly what it does.
_PARSER_KEYS = frozenset(
    [
        "request",
        "body",
        "response",
        "timestamp",
        "arrival_time",
        "time",
        "created_at",
        "end_timestamp",
        "end_time",
        "finished_at",
        "latency_s",
        "session_id",
        "conversation_id",
        "session",
        "user_id",
        "metadata",
    ]
)


@dataclass(frozen=True, slots=True)
class CaptureEvent:
    """One forwarded request, as the request path hands it over (cheap to build)."""

    body: Mapping[str, Any]
    arrival_unix_s: float
    end_unix_s: float
    session_id: str | None
    model: str
    workload: str | None
    backend: str
    status: int
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    token_ids: tuple[str, TokenIds] | None = None
    """(tokenizer name, the prompt's ids) when the route tokenized it already
    (cache_aware): capture does not tokenize again if its tokenizer has that name."""
    observe: bool = False
    """Hand the record to the capture's ``on_records`` (the live traffic window takes
    its prompt blocks from capture when the route did not tokenize)."""


def capture_event(
    request: Request,
    body: Mapping[str, Any],
    session_id: str | None,
    status: int,
    clock: Callable[[], float],
    wall_clock: Callable[[], float],
    *,
    observe: bool = False,
) -> CaptureEvent:
    """The event of a request whose answer is done (its usage is known by then):
    references only, cheap enough for the request path."""
    ctx = request.ctx
    end_unix_s = wall_clock()
    return CaptureEvent(
        body=body,
        arrival_unix_s=end_unix_s - (clock() - request.received_s),
        end_unix_s=end_unix_s,
        session_id=session_id,
        model=ctx.model,
        workload=ctx.workload.value if ctx.workload else None,
        backend=ctx.backend,
        status=status,
        prompt_tokens=ctx.prompt_tokens,
        completion_tokens=ctx.completion_tokens,
        cached_tokens=ctx.cached_tokens,
        token_ids=ctx.prompt_token_ids,
        observe=observe,
    )


def capture_records(
    events: Sequence[CaptureEvent],
    prompts: PromptTokens,
    *,
    block_size_tokens: int,
    include_text: bool,
) -> list[dict[str, Any] | Exception]:
    """The trace record of each event, or why it has none (a body the trace cannot
    hold: :class:`RecordError`; a prompt that cannot be tokenized:
    :class:`KvrouteError`). Pure apart from the tokenizer's memo. The block hashes of
    the whole batch are computed in one vectorised pass."""
    out: list[dict[str, Any] | Exception] = []
    token_ids: list[TokenIds] = []
    for event in events:
        try:
            rec, ids = _record_without_hashes(event, prompts, include_text)
        except (RecordError, KvrouteError) as exc:
            out.append(exc)
            continue
        out.append(rec)
        token_ids.append(ids)
    hashes = _batch_block_hashes(token_ids, block_size_tokens)
    records = (r for r in out if isinstance(r, dict))
    for rec, ids, h in zip(records, token_ids, hashes, strict=True):
        rec["input_len"], rec["hashes"] = int(ids.shape[0]), h
    return out


def capture_record(
    event: CaptureEvent, prompts: PromptTokens, *, block_size_tokens: int, include_text: bool
) -> dict[str, Any]:
    """:func:`capture_records` for one event; raises instead of returning the error."""
    [rec] = capture_records(
        [event], prompts, block_size_tokens=block_size_tokens, include_text=include_text
    )
    if isinstance(rec, Exception):
        raise rec
    return rec


def _record_without_hashes(
    event: CaptureEvent, prompts: PromptTokens, include_text: bool
) -> tuple[dict[str, Any], TokenIds]:
    attrs, token_prompt = _attrs(event.body)
    text = ""
    if token_prompt is not None:
        token_ids = token_prompt.token_ids
    else:
        routed = event.token_ids
        if routed is not None and routed[0] == prompts.tokenizer.name:
            ids: TokenIds | None = routed[1]
        else:
            ids = prompts.token_ids(event.body)
        if ids is None or include_text:
            text = prompts.text(event.body) or ""  # raises what stopped the tokenizing
        token_ids = prompts.encode(text) if ids is None else ids
    rec: dict[str, Any] = {
        "t": round(event.arrival_unix_s, 6),
        "end_t": round(event.end_unix_s, 6),
        "status": event.status,
    }
    optional = {
        "session": _pseudonym(event.session_id) if event.session_id else None,
        "model": event.model or None,
        "output_len": event.completion_tokens,
        "class": event.workload,
        "backend": event.backend or None,
        "cached": event.cached_tokens,
        "usage_prompt_tokens": event.prompt_tokens,
        "turn": attrs.turn_index,
        "messages": attrs.num_messages,
    }
    rec.update({k: v for k, v in optional.items() if v is not None})
    if attrs.has_tools:
        rec["tools"] = True
    if attrs.structured_output is not StructuredOutput.NONE:
        rec["structured"] = attrs.structured_output.value
    if include_text and text:
        rec["prompt_text"] = text
    return rec, token_ids


def _attrs(body: Mapping[str, Any]) -> tuple[RequestAttrs, TokenPrompt | None]:
    """What the trace records of a body (as :class:`OpenAILogFormat` reads it), and
    its prompt when that is token ids. Plain chat bodies take a short path with the
    same checks and results; anything else goes through the format's parser."""
    messages = body.get("messages")
    if (
        isinstance(messages, list)
        and messages
        and _PARSER_KEYS.isdisjoint(body)
        and all(type(body.get(k, "")) is str for k in ("model", "user"))
    ):
        tools = body.get("tools") or body.get("functions")
        roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
        if all(type(r) is str for r in roles) and (tools is None or isinstance(tools, list)):
            attrs = RequestAttrs(
                has_tools=bool(tools) or "tool" in roles,
                structured_output=structured_output_kind(dict(body)),
                turn_index=roles.count("assistant"),
                num_messages=len(messages),
            )
            return attrs, None
    parsed = OpenAILogFormat().parse(dict(body), 0, 0, ReadOptions())[0]
    prompt = parsed.prompt
    return parsed.attrs, prompt if isinstance(prompt, TokenPrompt) else None


def _batch_block_hashes(token_ids: Sequence[TokenIds], block_size_tokens: int) -> list[list[int]]:
    """:func:`~kvroute.trace.writer.prompt_block_hashes` of each prompt, vectorised
    over the batch: all full blocks in one pass, then the partial last blocks grouped
    by length, each chained to its parent as ``h = parent * P + content``."""
    if not token_ids:
        return []
    lengths = np.array([ids.shape[0] for ids in token_ids], dtype=np.int64)
    offsets = np.zeros(len(token_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate(token_ids)
    full, block_offsets = chain_hashes_batch(tokens, offsets, block_size_tokens, DEFAULT_SEED)
    num_full = np.diff(block_offsets)
    tail_lens = lengths - num_full * block_size_tokens
    parents = np.full(len(token_ids), DEFAULT_SEED, dtype=np.uint64)
    has_full = num_full > 0
    parents[has_full] = full[block_offsets[1:][has_full] - 1]
    tails = np.zeros(len(token_ids), dtype=np.uint64)
    multiplier = _chain_multiplier()
    for tail_len in np.unique(tail_lens[tail_lens > 0]).tolist():
        rows = np.flatnonzero(tail_lens == tail_len)
        starts = offsets[1:][rows] - tail_len
        idx = (starts[:, None] + np.arange(tail_len)).ravel()
        contents = block_contents(tokens[idx], tail_len)
        with np.errstate(over="ignore"):
            tails[rows] = parents[rows] * multiplier + contents
    out: list[list[int]] = []
    for i in range(len(token_ids)):
        hashes = full[block_offsets[i] : block_offsets[i + 1]].tolist()
        if tail_lens[i]:
            hashes.append(int(tails[i]))
        out.append(hashes)
    return out


def _chain_multiplier() -> np.uint64:
    """The chain's ``P`` (``h[i] = h[i-1] * P + content``), read off the public
    :func:`extend_chain` rather than a private constant."""
    block = np.zeros(1, dtype=np.uint32)
    return np.uint64((extend_chain(1, block) - extend_chain(0, block)) % (1 << 64))


def _pseudonym(session_id: str) -> str:
    """A stable stand-in for a session id: groups a session's requests without
    writing the id itself (it may be a user name or an e-mail address)."""
    return hashlib.blake2b(session_id.encode(), digest_size=8).hexdigest()
