"""Writing kvroute trace JSONL (:mod:`kvroute.trace.formats.kvroute`): the one record
encoder, used by ``kvroute export`` (:class:`TraceWriter`) and the gateway's capture.

Prompts are stored as chained block hashes only, never as text, so a trace can be
shared without the prompts it came from. Files are written through
:func:`kvroute.output_file.open_output`: a reader never sees half a file, an existing
trace is never left corrupted by a failed write, and a link, FIFO or device stays one.

A record is written in two parts, so a writer that sees one prompt many times (capture)
can keep the second part's JSON and reuse it::

    {"t": ..., "end_t": ..., "status": 200, ..., "usage_prompt_tokens": 40, | "turn": 0, "messages": 1, "input_len": 37, "hashes": [...]}
     <------- request_fields(): this request's own ----------------->   <--- prompt_json(prompt_fields(), ...): what its body decides --->

:func:`record_line` joins them, byte for byte what ``orjson.dumps`` of the whole record
gives. Fields that are None are left out.
"""

from __future__ import annotations

import enum
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np
import orjson

from kvroute.errors import InputError
from kvroute.output_file import open_output
from kvroute.trace.formats.kvroute import HEADER_KEY, SCHEMA_VERSION
from kvroute.trace.hashing import (
    DEFAULT_SEED,
    HASH_SCHEME,
    KEYED_HASH_SCHEME,
    chain_hashes,
    extend_chain,
    key_id,
    keyed_hashes,
)
from kvroute.trace.records import BlockPrompt, Request, StructuredOutput, TokenPrompt
from kvroute.types import BlockHashes, TokenIds


def prompt_block_hashes(
    token_ids: TokenIds, block_size_tokens: int, seed: int = DEFAULT_SEED
) -> BlockHashes:
    """Chained hashes of every full block plus the partial last block, if any."""
    full = chain_hashes(token_ids, block_size_tokens, seed)
    tail = token_ids[full.shape[0] * block_size_tokens :]
    if tail.shape[0] == 0:
        return full
    parent = int(full[-1]) if full.shape[0] else None
    return np.append(full, np.uint64(extend_chain(parent, tail, seed)))


def header_line(
    block_size_tokens: int,
    key_id: str | None,
    *,
    seed: int = DEFAULT_SEED,
    source: str | None = None,
) -> bytes:
    """A trace's first line (line end included): version, block size, hash scheme and
    seed, who wrote it (``source``), and the id of the key its hashes are keyed with
    (None: unkeyed)."""
    header: dict[str, Any] = {
        HEADER_KEY: SCHEMA_VERSION,
        "block_size": block_size_tokens,
        "hash_scheme": HASH_SCHEME if key_id is None else KEYED_HASH_SCHEME,
        "seed": seed,
    }
    if source is not None:
        header["source"] = source
    if key_id is not None:
        header["key_id"] = key_id
    return orjson.dumps(header) + b"\n"


def request_fields(  # noqa: PLR0917 -- one positional per field, in the record's order
    t: float | None,
    end_t: float | None,
    status: int | None,
    session: str | None,
    user: str | None,
    model: str | None,
    output_len: int | None,
    workload: str | None,
    backend: str | None,
    cached: int | None,
    usage_prompt_tokens: int | None,
) -> dict[str, Any]:
    """A record's first part, this request's own fields in the trace's order: arrival
    and end (unix s), the answer's HTTP status, session and user, model, output tokens,
    workload class and backend (capture), prompt tokens the engine reported cached, and
    the prompt tokens its usage counted. Positional: capture calls it per request."""
    rec: dict[str, Any] = {}
    if t is not None:
        rec["t"] = t
    if end_t is not None:
        rec["end_t"] = end_t
    if status is not None:
        rec["status"] = status
    if session is not None:
        rec["session"] = session
    if user is not None:
        rec["user"] = user
    if model is not None:
        rec["model"] = model
    if output_len is not None:
        rec["output_len"] = output_len
    if workload is not None:
        rec["class"] = workload
    if backend is not None:
        rec["backend"] = backend
    if cached is not None:
        rec["cached"] = cached
    if usage_prompt_tokens is not None:
        rec["usage_prompt_tokens"] = usage_prompt_tokens
    return rec


def prompt_fields(
    turn: int | None, num_messages: int | None, has_tools: bool, structured: StructuredOutput
) -> dict[str, Any]:
    """The start of a record's second part (what the request body decides): turn,
    messages, tools (only when true), structured output (only when there is one).
    The caller may add ``prompt_text``; :func:`prompt_json` adds the prompt's length
    and hashes."""
    fields: dict[str, Any] = {}
    if turn is not None:
        fields["turn"] = turn
    if num_messages is not None:
        fields["messages"] = num_messages
    if has_tools:
        fields["tools"] = True
    if structured is not StructuredOutput.NONE:
        fields["structured"] = structured.value
    return fields


def prompt_json(fields: dict[str, Any], input_len: int, hashes_json: bytes) -> bytes:
    """A record's second part as JSON, the members after the opening brace
    (``"turn":0,...,"input_len":37,"hashes":[...]}``): ``fields`` (from
    :func:`prompt_fields`; ``input_len`` is set in it), then the hashes, whose JSON
    array ``hashes_json`` the caller gives (capture reuses a known prefix's digits)."""
    fields["input_len"] = input_len
    # One join: each + would copy a long prompt's ~1 KB of digits again.
    return b"".join((orjson.dumps(fields)[1:-1], b',"hashes":', hashes_json, b"}"))


def record_line(request: dict[str, Any], prompt: bytes) -> bytes:
    """One record's JSON (no line end): :func:`request_fields`' part joined to
    :func:`prompt_json`'s."""
    if not request:
        return b"{" + prompt
    return orjson.dumps(request)[:-1] + b"," + prompt


class Layout(enum.Enum):
    """``kvroute``: a header line, then kvroute records. ``mooncake``: Mooncake records
    (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``) with the
    block size in each (``block_size``, as kvcache-simulator reads it), no header; a
    keyed export names its key in each record too (``key_id``)."""

    KVROUTE = "kvroute"
    MOONCAKE = "mooncake"


class TraceWriter:
    """Writes requests as kvroute trace records; use as a context manager.

    ``append`` accepts requests whose prompt is token ids (hashed here) or block hashes
    of the writer's block size. The file appears at ``path`` only when the writer is
    closed without an exception. With ``key`` every hash goes through
    :func:`~kvroute.trace.hashing.keyed_hashes` and the header names the key's id, so
    only traces written with the same key compare, and no prompt can be guessed from
    the file.
    """

    def __init__(
        self,
        path: Path,
        *,
        block_size_tokens: int = 16,
        seed: int = DEFAULT_SEED,
        key: bytes | None = None,
        layout: Layout = Layout.KVROUTE,
    ) -> None:
        self.path = path
        self.block_size_tokens = block_size_tokens
        self.seed = seed
        self.key = key
        self.key_id = None if key is None else key_id(key)
        self.layout = layout
        self.num_written = 0
        self._output: AbstractContextManager[IO[bytes]] | None = None
        self._file: IO[bytes] | None = None

    def __enter__(self) -> TraceWriter:
        self._output = open_output(self.path)
        self._file = self._output.__enter__()
        if self.layout is Layout.MOONCAKE:
            return self
        self._file.write(header_line(self.block_size_tokens, self.key_id, seed=self.seed))
        return self

    def append(self, req: Request) -> None:
        assert self._file is not None, "use TraceWriter as a context manager"
        prompt = req.prompt
        if isinstance(prompt, TokenPrompt):
            hashes = prompt_block_hashes(prompt.token_ids, self.block_size_tokens, self.seed)
            input_len = prompt.num_tokens
        elif isinstance(prompt, BlockPrompt):
            if prompt.block_size_tokens != self.block_size_tokens:
                raise InputError(
                    f"request has {prompt.block_size_tokens}-token blocks, the trace {self.block_size_tokens}",
                    line=req.source_line,
                )
            hashes, input_len = prompt.block_hashes, prompt.num_tokens
        else:
            raise TypeError("tokenize chat and text prompts before writing a kvroute trace")
        if self.key is not None:
            hashes = keyed_hashes(hashes, self.key)
        if self.layout is Layout.MOONCAKE:
            self._file.write(orjson.dumps(self._mooncake(req, hashes, input_len)) + b"\n")
            self.num_written += 1
            return
        request = request_fields(
            req.arrival_s,
            req.end_s,
            None,
            req.session_id,
            req.user_id,
            req.model,
            req.output_len,
            None,
            None,
            req.reported_cached_tokens,
            None,
        )
        attrs = req.attrs
        fields = prompt_fields(
            attrs.turn_index, attrs.num_messages, attrs.has_tools, attrs.structured_output
        )
        line = record_line(request, prompt_json(fields, input_len, orjson.dumps(hashes.tolist())))
        self._file.write(line + b"\n")
        self.num_written += 1

    def _mooncake(self, req: Request, hashes: BlockHashes, input_len: int) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "timestamp": None if req.arrival_s is None else round(req.arrival_s * 1000, 3),
            "input_length": input_len,
            "output_length": req.output_len,
            "hash_ids": hashes.tolist(),
            "block_size": self.block_size_tokens,
        }
        optional = {"session_id": req.session_id, "model": req.model, "key_id": self.key_id}
        rec.update({k: v for k, v in optional.items() if v is not None})
        return {k: v for k, v in rec.items() if v is not None}

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._output is not None
        self._output.__exit__(exc_type, exc, tb)
        self._output = self._file = None
