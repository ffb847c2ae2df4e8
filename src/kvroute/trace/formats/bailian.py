"""Alibaba's Bailian (Qwen) usage traces: Mooncake-shaped records with conversations.

One request per line (the public ``qwen-bailian-usagetraces-anon`` dataset)::

    {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, ...]}

``timestamp`` is in **seconds** from the trace start (Mooncake's is milliseconds);
``hash_ids`` are salted ids of 16-token blocks; ``chat_id`` names one request and
``parent_chat_id`` the earlier turn it follows (``-1`` or ``null``: a new
conversation), so a conversation is the chain of parents up to its root, whose id
becomes the session. ``type`` (text, search, image, file) is kept as the model label,
``turn`` as the turn index. The fields and their quirks (per-record ``block_size``,
string ids, an unhashed partial last block) are read as :mod:`.mooncake` reads them.
llmtrafficlens writes the same fields with ``timestamp`` in milliseconds: its arrival
rates then read 1000 times slower, while every overlap figure is unaffected.
"""

from __future__ import annotations

from typing import Any

from kvroute.trace.formats.base import Container, ReadOptions, RecordError, require_dict
from kvroute.trace.formats.mooncake import block_prompt, output_length
from kvroute.trace.records import Request, RequestAttrs

DEFAULT_BLOCK_SIZE_TOKENS = 16


def _chat_key(value: Any, field: str) -> str | None:
    """A chat id as a string; ``None`` for no parent (-1, null, empty)."""
    if value is None or value in (-1, "", "-1"):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RecordError(f"expected an id, got {type(value).__name__}", field)
    return str(value)


class BailianFormat:
    name = "bailian"
    description = "Alibaba Bailian/Qwen trace JSONL: chat_id, parent_chat_id, timestamp (s), hash_ids (16-token blocks)"
    container = Container.JSONL

    def __init__(self) -> None:
        # chat id -> its conversation's root chat id (per file, as the Protocol allows)
        self._root_of: dict[str, str] = {}

    def sniff(self, first: Any) -> bool:
        return (
            isinstance(first, dict)
            and "hash_ids" in first
            and "chat_id" in first
            and ("parent_chat_id" in first or "turn" in first)
        )

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        obj = require_dict(record)
        prompt = block_prompt(obj, line, options, DEFAULT_BLOCK_SIZE_TOKENS)
        chat = _chat_key(obj.get("chat_id"), "chat_id")
        parent = _chat_key(obj.get("parent_chat_id"), "parent_chat_id")
        root = self._root_of.get(parent, parent) if parent is not None else chat
        if chat is not None and root is not None:
            self._root_of[chat] = root
        ts = obj.get("timestamp")
        if ts is not None and (type(ts) is not int and type(ts) is not float):
            raise RecordError("expected seconds as a number", "timestamp")
        turn = obj.get("turn")
        if turn is not None and (type(turn) is not int or turn < 0):
            raise RecordError("expected a non-negative integer", "turn")
        kind = obj.get("type")
        return [
            Request(
                prompt=prompt,
                arrival_s=None if ts is None else float(ts),
                output_len=output_length(obj),
                session_id=root,
                model=kind if isinstance(kind, str) and kind else None,
                attrs=RequestAttrs(turn_index=turn),
                source_line=line,
            )
        ]
