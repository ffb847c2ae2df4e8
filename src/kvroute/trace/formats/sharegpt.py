"""ShareGPT-style conversations, as a JSON array or JSONL.

Each conversation holds turns, either ShareGPT's ``{"from": "human"|"gpt"|"system",
"value": ...}`` or OpenAI's ``{"role": ..., "content": ...}``, under ``conversations``
or ``messages``. Every assistant turn becomes one request whose prompt is the whole
history before it, which is exactly how multi-turn traffic reaches an engine; the
assistant's text is kept as that request's output.
"""

from __future__ import annotations

from typing import Any

from kvroute.trace.formats.base import (
    Container,
    ReadOptions,
    RecordError,
    opt_str,
    opt_time_s,
    require_dict,
)
from kvroute.trace.records import ChatPrompt, Request, RequestAttrs

_ROLE = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "function_call": "assistant",
}


def _turns(obj: dict[str, Any]) -> tuple[str, list[Any]]:
    for key in ("conversations", "conversation", "messages", "items"):
        value = obj.get(key)
        if value is not None:
            if not isinstance(value, list):
                raise RecordError("expected a list of turns", key)
            return key, value
    raise RecordError(
        "no conversation found (expected 'conversations' or 'messages')", "conversations"
    )


def _message(turn: Any, field: str) -> dict[str, Any]:
    t = require_dict(turn, field)
    speaker = t.get("from", t.get("role"))
    text = t.get("value", t.get("content"))
    if not isinstance(speaker, str):
        raise RecordError("missing speaker ('from' or 'role')", f"{field}.from")
    role = _ROLE.get(speaker.lower())
    if role is None:
        raise RecordError(
            f"unknown speaker {speaker!r} (expected human, gpt, system, tool)", f"{field}.from"
        )
    if not isinstance(text, str):
        raise RecordError("expected text ('value' or 'content')", f"{field}.value")
    return {"role": role, "content": text}


class ShareGPTFormat:
    name = "sharegpt"
    description = (
        "ShareGPT-style conversations (JSON array or JSONL); one request per assistant turn"
    )
    container = Container.JSON_ARRAY

    def sniff(self, first: Any) -> bool:
        if not isinstance(first, dict):
            return False
        if "conversations" in first or "conversation" in first:
            return True
        msgs = first.get("messages")
        # Conversations *with* assistant turns and without request fields (model, tools).
        return (
            isinstance(msgs, list)
            and "model" not in first
            and any(isinstance(m, dict) and m.get("role") == "assistant" for m in msgs)
        )

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        obj = require_dict(record)
        key, turns = _turns(obj)
        session = opt_str(obj, "id", "conversation_id", "session_id") or f"conversation-{index}"
        arrival = opt_time_s(obj, "timestamp", "created_at")
        messages = [_message(t, f"{key}[{i}]") for i, t in enumerate(turns)]
        history: list[dict[str, Any]] = []
        out: list[Request] = []
        turn_index = 0
        for msg in messages:
            if msg["role"] == "assistant" and any(m["role"] == "user" for m in history):
                out.append(
                    Request(
                        prompt=ChatPrompt(list(history)),
                        arrival_s=arrival,
                        session_id=session,
                        model=opt_str(obj, "model"),
                        output_text=msg["content"],
                        attrs=RequestAttrs(
                            has_tools=any(m["role"] == "tool" for m in history),
                            turn_index=turn_index,
                            num_messages=len(history),
                        ),
                        source_line=line,
                    )
                )
                turn_index += 1
            history.append(msg)
        return out
