"""What capture records of a request body besides its prompt: turn, number of
messages, tools, structured output, exactly as :class:`OpenAILogFormat` reads them,
as the trace record's fields. Plain chat bodies take a short path with the same
checks and results; anything else goes through the format's parser."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.formats.openai_log import OpenAILogFormat, structured_output_kind
from kvroute.trace.records import StructuredOutput, TokenPrompt
from kvroute.trace.writer import prompt_fields

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

# Request fields that say nothing about structured output (and are not parser keys):
# a body with no other key skips structured_output_kind (a test checks the set).
_PLAIN_KEYS = frozenset(
    [
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logprobs",
        "top_logprobs",
        "user",
    ]
)


def attr_fields(body: Mapping[str, Any]) -> tuple[dict[str, Any], TokenPrompt | None]:
    """What the trace records of a body (as :class:`OpenAILogFormat` reads it), as the
    record's fields in order (:func:`~kvroute.trace.writer.prompt_fields`), and its prompt when that is token ids. Plain chat bodies
    take a short path with the same checks and results; anything else goes through the
    format's parser."""
    if not isinstance(body, dict):
        body = dict(body)
    return _dict_attr_fields(body)


def _dict_attr_fields(body: dict[str, Any]) -> tuple[dict[str, Any], TokenPrompt | None]:
    # A dict, and plain loops rather than set and list methods: compiled, each of those
    # is a method call through the interpreter (~0.3 µs apiece on a request).
    messages = body.get("messages")
    if (
        type(messages) is list
        and messages
        and not _any_key_in(body, _PARSER_KEYS)
        and type(body.get("model", "")) is str
        and type(body.get("user", "")) is str
    ):
        tools = body.get("tools") or body.get("functions")
        turn, has_tool, plain = 0, False, tools is None or type(tools) is list
        for m in messages:
            role = m.get("role") if type(m) is dict else None
            if type(role) is not str:
                plain = False
                break
            if role == "assistant":
                turn += 1
            elif role == "tool":
                has_tool = True
        if plain:
            structured = (
                StructuredOutput.NONE
                if _all_keys_in(body, _PLAIN_KEYS)
                else structured_output_kind(body)
            )
            return prompt_fields(turn, len(messages), bool(tools or has_tool), structured), None
    parsed = OpenAILogFormat().parse(dict(body), 0, 0, ReadOptions())[0]
    attrs, prompt = parsed.attrs, parsed.prompt
    fields = prompt_fields(
        attrs.turn_index, attrs.num_messages, attrs.has_tools, attrs.structured_output
    )
    return fields, prompt if isinstance(prompt, TokenPrompt) else None


def _any_key_in(body: dict[str, Any], keys: frozenset[str]) -> bool:
    return any(key in keys for key in body)


def _all_keys_in(body: dict[str, Any], keys: frozenset[str]) -> bool:
    return all(key in keys for key in body)
