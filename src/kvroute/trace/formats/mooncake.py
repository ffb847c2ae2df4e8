"""Mooncake trace JSONL (FAST'25 traces and the tools that reproduce them).

One request per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is in milliseconds from the trace start; ``hash_ids`` are ids of
512-token blocks, equal ids meaning equal prefixes (overridable with
``ReadOptions.block_size_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kvroute.trace.formats.base import (
    Container,
    ReadOptions,
    RecordError,
    opt_int,
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

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> Iterator[Request]:
        obj = require_dict(record)
        block_size = options.block_size_tokens or DEFAULT_BLOCK_SIZE_TOKENS
        ids = obj.get("hash_ids")
        if not isinstance(ids, list):
            raise RecordError("expected a list of integers", "hash_ids")
        try:
            hashes = np.array(ids, dtype=np.uint64)
        except (TypeError, ValueError, OverflowError):
            raise RecordError("expected a list of non-negative integers", "hash_ids") from None
        if hashes.ndim != 1:
            raise RecordError("expected a flat list of integers", "hash_ids")
        input_len = opt_int(obj, "input_length")
        if input_len is None:
            raise RecordError("missing", "input_length")
        num_blocks = len(ids)
        if not (num_blocks - 1) * block_size < input_len <= num_blocks * block_size and not (
            num_blocks == 0 and input_len == 0
        ):
            raise RecordError(
                f"{num_blocks} blocks of {block_size} tokens cannot hold {input_len} tokens "
                "(wrong --block-size?)",
                "input_length",
            )
        ts = obj.get("timestamp")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float)):
            raise RecordError("expected milliseconds as a number", "timestamp")
        yield Request(
            prompt=BlockPrompt(hashes, block_size, input_len),
            arrival_s=None if ts is None else float(ts) / 1000.0,
            output_len=opt_int(obj, "output_length"),
            session_id=opt_str(obj, "session_id", "chat_id", "conversation_id"),
            source_line=line,
        )
