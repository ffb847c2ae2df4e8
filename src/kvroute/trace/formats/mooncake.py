"""Mooncake trace JSONL (FAST'25 traces and the tools that reproduce them), and the
hash-only exports of peers that share its fields.

One request per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is in milliseconds from the trace start; ``hash_ids`` are ids of
512-token blocks, equal ids meaning equal prefixes. Optional fields some exports add
are kept: ``session_id`` (or ``chat_id``) and ``model``. What the peers' exports add:

- kvcache-simulator: a per-record ``block_size`` (used unless ``--block-size`` says
  otherwise; a trace whose records disagree is refused at the first that differs),
  ``block_tokens`` (per-block token counts, not needed: blocks are full but the last),
  and ``hash_ids`` given as strings (each string is hashed to a 64-bit id, equal
  strings equal ids).
- llmtrafficlens: the trailing partial block is not hashed, so ``input_length`` may run
  up to one block past the hashed ones (a prompt shorter than a block has no hash at
  all). That tail gets an id of its own, unique to the record: its content is unknown,
  so it never matches, and the prompt keeps its true length.

:func:`block_prompt` parses these fields for every Mooncake-shaped format (Bailian too).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt

from kvroute.trace.formats.base import (
    Container,
    ReadOptions,
    RecordError,
    opt_str,
    require_dict,
)
from kvroute.trace.records import BlockPrompt, Request

DEFAULT_BLOCK_SIZE_TOKENS = 512


def _string_id(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")


def _unhashed_tail_id(line: int) -> int:
    """An id no other block has: the unknown content of a record's partial last block."""
    return _string_id(f"kvroute:unhashed-tail:{line}") | (1 << 63)


def _ids(values: list[Any]) -> npt.NDArray[np.uint64]:
    try:
        return np.array(values, dtype=np.uint64)
    except (TypeError, ValueError, OverflowError):
        pass
    out: list[int] = []
    for v in values:
        if type(v) is str:
            out.append(_string_id(v))
        elif type(v) is int and v >= 0:
            out.append(v)
        else:
            raise RecordError("expected non-negative integers or strings", "hash_ids")
    return np.array(out, dtype=np.uint64)


def block_prompt(
    obj: dict[str, Any], line: int, options: ReadOptions, default_block_size: int
) -> BlockPrompt:
    """The prompt of a Mooncake-shaped record: ``hash_ids``, ``input_length`` and the
    block size (``--block-size``, else the record's ``block_size``, else the default)."""
    block_size = options.block_size_tokens
    if block_size is None:
        own = obj.get("block_size")
        if own is not None and (type(own) is not int or own < 1):
            raise RecordError("expected a positive integer", "block_size")
        block_size = own or default_block_size
    ids = obj.get("hash_ids")
    input_len = obj.get("input_length")
    if type(ids) is not list:
        raise RecordError("expected a list of integers", "hash_ids")
    if type(input_len) is not int or input_len < 0:
        raise RecordError("expected a non-negative integer", "input_length")
    hashes = _ids(ids)
    if hashes.ndim != 1:
        raise RecordError("expected a flat list of integers", "hash_ids")
    num_blocks = len(ids)
    if num_blocks * block_size < input_len < (num_blocks + 1) * block_size:
        hashes = np.append(hashes, np.uint64(_unhashed_tail_id(line)))
        num_blocks += 1
    if not (num_blocks - 1) * block_size < input_len <= num_blocks * block_size and (
        num_blocks or input_len
    ):
        raise RecordError(
            f"{len(ids)} block{'' if len(ids) == 1 else 's'} of {block_size} tokens cannot hold "
            f"{input_len} tokens (wrong --block-size?)",
            "input_length",
        )
    return BlockPrompt(hashes, block_size, input_len)


def output_length(obj: dict[str, Any]) -> int | None:
    value = obj.get("output_length")
    if value is not None and (type(value) is not int or value < 0):
        raise RecordError("expected a non-negative integer", "output_length")
    return value


class MooncakeFormat:
    name = "mooncake"
    description = "Mooncake trace JSONL: timestamp (ms), input_length, output_length, hash_ids"
    container = Container.JSONL

    def sniff(self, first: Any) -> bool:
        return isinstance(first, dict) and "hash_ids" in first and "input_length" in first

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        # Hot path for million-line traces: plain type checks, one array conversion.
        obj = require_dict(record)
        prompt = block_prompt(obj, line, options, DEFAULT_BLOCK_SIZE_TOKENS)
        ts = obj.get("timestamp")
        if ts is not None and (type(ts) is not int and type(ts) is not float):
            raise RecordError("expected milliseconds as a number", "timestamp")
        session = obj.get("session_id") or obj.get("chat_id")
        return [
            Request(
                prompt=prompt,
                arrival_s=None if ts is None else ts / 1000.0,
                output_len=output_length(obj),
                session_id=None if session is None else opt_str(obj, "session_id", "chat_id"),
                model=None if obj.get("model") is None else opt_str(obj, "model"),
                source_line=line,
            )
        ]
