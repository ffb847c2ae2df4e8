"""Mooncake trace JSONL (FAST'25 traces and the tools that reproduce them).

One request per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is in milliseconds from the trace start; ``hash_ids`` are ids of
512-token blocks, equal ids meaning equal prefixes (overridable with
``ReadOptions.block_size_tokens``). Optional fields some exports add are kept:
``session_id`` (or ``chat_id``) and ``model``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvroute.trace.formats.base import (
    Container,
    ReadOptions,
    RecordError,
    opt_str,
    require_dict,
)
from kvroute.trace.records import BlockPrompt, Request

DEFAULT_BLOCK_SIZE_TOKENS = 512


class MooncakeFormat:
    name = "mooncake"
    description = "Mooncake trace JSONL: timestamp (ms), input_length, output_length, hash_ids"
    container = Container.JSONL

    def sniff(self, first: Any) -> bool:
        return isinstance(first, dict) and "hash_ids" in first and "input_length" in first

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        # Hot path for million-line traces: plain type checks, one array conversion.
        obj = require_dict(record)
        block_size = options.block_size_tokens or DEFAULT_BLOCK_SIZE_TOKENS
        ids = obj.get("hash_ids")
        input_len = obj.get("input_length")
        if type(ids) is not list:
            raise RecordError("expected a list of integers", "hash_ids")
        if type(input_len) is not int or input_len < 0:
            raise RecordError("expected a non-negative integer", "input_length")
        try:
            hashes = np.array(ids, dtype=np.uint64)
        except (TypeError, ValueError, OverflowError):
            raise RecordError("expected a list of non-negative integers", "hash_ids") from None
        if hashes.ndim != 1:
            raise RecordError("expected a flat list of integers", "hash_ids")
        num_blocks = len(ids)
        if not (num_blocks - 1) * block_size < input_len <= num_blocks * block_size and (
            num_blocks or input_len
        ):
            raise RecordError(
                f"{num_blocks} blocks of {block_size} tokens cannot hold {input_len} tokens (wrong --block-size?)",
                "input_length",
            )
        ts = obj.get("timestamp")
        if ts is not None and (type(ts) is not int and type(ts) is not float):
            raise RecordError("expected milliseconds as a number", "timestamp")
        output_len = obj.get("output_length")
        if output_len is not None and (type(output_len) is not int or output_len < 0):
            raise RecordError("expected a non-negative integer", "output_length")
        session = obj.get("session_id") or obj.get("chat_id")
        return [
            Request(
                prompt=BlockPrompt(hashes, block_size, input_len),
                arrival_s=None if ts is None else ts / 1000.0,
                output_len=output_len,
                session_id=None if session is None else opt_str(obj, "session_id", "chat_id"),
                model=None if obj.get("model") is None else opt_str(obj, "model"),
                source_line=line,
            )
        ]
