"""OpenAI request logs, JSONL: one chat-completions or completions request per line.

Either the bare request body::

    {"model": "m", "messages": [...], "tools": [...], "response_format": {...}}
    {"model": "m", "prompt": "..."}

or the body wrapped with what a proxy logs around it::

    {"timestamp": "2026-01-02T03:04:05Z", "session_id": "s1", "user": "u1",
     "request": {...body...}, "response": {...}, "end_timestamp": ...}

The wrapper may name the body ``request`` or ``body`` and the answer ``response``;
times are epoch seconds / milliseconds or ISO 8601. From the response, ``usage`` gives
output tokens and ``prompt_tokens_details.cached_tokens``; the first choice's message
content gives the output text (used for multi-turn analysis).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvroute.trace.formats.base import (
    Container,
    ReadOptions,
    RecordError,
    opt_int,
    opt_str,
    opt_time_s,
    require_dict,
)
from kvroute.trace.records import (
    ChatPrompt,
    Request,
    RequestAttrs,
    StructuredOutput,
    TextPrompt,
    TokenPrompt,
)

_BODY_KEYS = ("request", "body")
_STRUCTURED_FIELDS = {
    "guided_json": StructuredOutput.JSON_SCHEMA,
    "json_schema": StructuredOutput.JSON_SCHEMA,
    "guided_regex": StructuredOutput.REGEX,
    "regex": StructuredOutput.REGEX,
    "guided_grammar": StructuredOutput.GRAMMAR,
    "grammar": StructuredOutput.GRAMMAR,
    "ebnf": StructuredOutput.GRAMMAR,
    "guided_choice": StructuredOutput.CHOICE,
}


def structured_output_kind(body: dict[str, Any]) -> StructuredOutput:
    """What constrained output a request body asks for (OpenAI, vLLM, SGLang, llama.cpp
    fields), looking into ``extra_body`` objects nested in it: a loop, not recursion, as
    the depth is the client's (the gateway classifies bodies it has not vetted)."""
    while True:
        rf = body.get("response_format")
        if isinstance(rf, dict):
            kind = rf.get("type")
            if kind == "json_object":
                return StructuredOutput.JSON_OBJECT
            if kind == "json_schema":
                return StructuredOutput.JSON_SCHEMA
        for name, kind_ in _STRUCTURED_FIELDS.items():
            if body.get(name) is not None:
                return kind_
        extra = body.get("extra_body")
        if not isinstance(extra, dict):
            return StructuredOutput.NONE
        body = extra


def _messages(body: dict[str, Any], field_prefix: str) -> list[dict[str, Any]]:
    msgs = body["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise RecordError("expected a non-empty list of messages", f"{field_prefix}messages")
    for i, msg in enumerate(msgs):
        if not isinstance(msg, dict):
            raise RecordError("expected a message object", f"{field_prefix}messages[{i}]")
        if not isinstance(msg.get("role"), str):
            raise RecordError("missing or non-string role", f"{field_prefix}messages[{i}].role")
    return msgs


def _output_text(response: dict[str, Any]) -> str | None:
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    msg = choice.get("message")
    if isinstance(msg, dict) and isinstance(msg.get("content"), str):
        return str(msg["content"])
    text = choice.get("text")
    return text if isinstance(text, str) else None


def _completion_prompt(value: Any, field: str) -> TextPrompt | TokenPrompt:
    """A completions ``prompt``: a string, or token ids (the API accepts both)."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]  # a batch of one
    if isinstance(value, str):
        return TextPrompt(value)
    if isinstance(value, list):
        if not value:
            return TokenPrompt(np.empty(0, dtype=np.uint32))
        try:
            ids = np.array(value)
        except (ValueError, OverflowError):
            ids = np.empty(0, dtype=object)
        if ids.ndim == 1 and ids.dtype.kind in "iu" and ids.min() >= 0 and ids.max() < 2**32:
            return TokenPrompt(ids.astype(np.uint32))
    raise RecordError(
        "expected a string or a list of token ids (batched prompts are not supported)", field
    )


class OpenAILogFormat:
    name = "openai"
    description = "OpenAI chat/completions request bodies, JSONL, optionally wrapped with time, session and response"
    container = Container.JSONL

    def sniff(self, first: Any) -> bool:
        if not isinstance(first, dict):
            return False
        body = next((first[k] for k in _BODY_KEYS if isinstance(first.get(k), dict)), first)
        return "messages" in body or "prompt" in body

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        outer = require_dict(record)
        body_key = next((k for k in _BODY_KEYS if k in outer), None)
        body = require_dict(outer[body_key], body_key) if body_key else outer
        prefix = f"{body_key}." if body_key else ""

        if "messages" in body:
            msgs = _messages(body, prefix)
            tools = body.get("tools") or body.get("functions")
            if tools is not None and not isinstance(tools, list):
                raise RecordError("expected a list", f"{prefix}tools")
            prompt: ChatPrompt | TextPrompt | TokenPrompt = ChatPrompt(msgs, tools or None)
            turn_index = sum(1 for m in msgs if m.get("role") == "assistant")
            num_messages: int | None = len(msgs)
            has_tools = bool(tools) or any(m.get("role") == "tool" for m in msgs)
        elif "prompt" in body:
            prompt = _completion_prompt(body["prompt"], f"{prefix}prompt")
            turn_index, num_messages, has_tools = None, None, False
        else:
            raise RecordError("neither 'messages' nor 'prompt' present", f"{prefix}messages")

        response_raw = outer.get("response")
        response = require_dict(response_raw, "response") if response_raw is not None else {}
        usage_raw = response.get("usage")
        usage = require_dict(usage_raw, "response.usage") if usage_raw is not None else {}
        details_raw = usage.get("prompt_tokens_details")
        details = (
            require_dict(details_raw, "response.usage.prompt_tokens_details") if details_raw else {}
        )
        metadata_raw = outer.get("metadata", body.get("metadata"))
        metadata = metadata_raw if isinstance(metadata_raw, dict) else {}

        arrival = opt_time_s(outer, "timestamp", "arrival_time", "time", "created_at")
        end = opt_time_s(outer, "end_timestamp", "end_time", "finished_at")
        if end is None and arrival is not None:
            latency = outer.get("latency_s")
            if isinstance(latency, int | float) and not isinstance(latency, bool):
                end = arrival + float(latency)
        try:
            output_len = opt_int(usage, "completion_tokens")
            cached = opt_int(details, "cached_tokens")
        except RecordError as exc:
            raise RecordError(exc.message, f"response.usage.{exc.field}") from None
        return [
            Request(
                prompt=prompt,
                arrival_s=arrival,
                end_s=end,
                session_id=opt_str(outer, "session_id", "conversation_id", "session")
                or opt_str(metadata, "session_id", "conversation_id"),
                user_id=opt_str(outer, "user", "user_id") or opt_str(body, "user"),
                model=opt_str(body, "model") or opt_str(outer, "model"),
                output_len=output_len,
                output_text=_output_text(response),
                attrs=RequestAttrs(
                    has_tools=has_tools,
                    structured_output=structured_output_kind(body),
                    turn_index=turn_index,
                    num_messages=num_messages,
                ),
                reported_cached_tokens=cached,
                source_line=line,
            )
        ]
