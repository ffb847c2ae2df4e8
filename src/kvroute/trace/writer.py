"""Writing kvroute trace JSONL (:mod:`kvroute.trace.formats.kvroute`).

Prompts are stored as chained block hashes only, never as text, so a trace can be
shared without the prompts it came from. Files are written through
:func:`kvroute.output_file.open_output`: a reader never sees half a file, an existing
trace is never left corrupted by a failed write, and a link, FIFO or device stays one.
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
        header: dict[str, Any] = {
            HEADER_KEY: SCHEMA_VERSION,
            "block_size": self.block_size_tokens,
            "hash_scheme": HASH_SCHEME if self.key_id is None else KEYED_HASH_SCHEME,
            "seed": self.seed,
        }
        if self.key_id is not None:
            header["key_id"] = self.key_id
        self._file.write(orjson.dumps(header) + b"\n")
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
        rec: dict[str, Any] = {"input_len": input_len, "hashes": hashes.tolist()}
        optional = {
            "t": req.arrival_s,
            "end_t": req.end_s,
            "session": req.session_id,
            "user": req.user_id,
            "model": req.model,
            "output_len": req.output_len,
            "turn": req.attrs.turn_index,
            "messages": req.attrs.num_messages,
            "cached": req.reported_cached_tokens,
        }
        rec.update({k: v for k, v in optional.items() if v is not None})
        if req.attrs.has_tools:
            rec["tools"] = True
        if req.attrs.structured_output is not StructuredOutput.NONE:
            rec["structured"] = req.attrs.structured_output.value
        self._file.write(orjson.dumps(rec) + b"\n")
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
