"""Workload classification: one cheap, explainable label per request. Pure.

The label is a metrics dimension and a route key. Rules run in this order and the
first that holds wins; ``reason`` says which, in words a person can check::

    structured   response_format json_object/json_schema, or a guided_* / regex /
                 grammar field (trace.formats.openai_log.structured_output_kind)
    agent        chat whose history holds >= agent_min_steps assistant or tool
                 messages (an agent loop or a long conversation: prefix-heavy)
    tools        tools offered (or tool history) but a short history
    long_prefix  the shared prefix is long: by default the leading system
                 messages reach long_prefix_min_chars; a PrefixOracle (a later
                 prefix index) can say so instead
    chat         any other chat request
    completion   any other /v1/completions request

Structured output comes first because it changes how the engine decodes (grammar
backends differ most between engines); agent before tools because a tool loop's
growing history is what prefix caches reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.types import WorkloadClass
from kvroute.trace.formats.openai_log import structured_output_kind
from kvroute.trace.records import StructuredOutput


class PrefixOracle(Protocol):
    """Knows how many leading characters of a request other requests share (a later
    prefix index over live traffic); None when it cannot tell."""

    def shared_prefix_chars(self, body: Mapping[str, Any]) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Classification:
    workload: WorkloadClass
    reason: str


def classify(
    body: Mapping[str, Any],
    *,
    is_chat: bool,
    options: ClassifyOptions,
    oracle: PrefixOracle | None = None,
) -> Classification:
    """Label one decoded request body (see the module docstring for the rules)."""
    structured = structured_output_kind(dict(body))
    if structured is not StructuredOutput.NONE:
        return Classification(WorkloadClass.STRUCTURED, f"structured output: {structured.value}")
    messages = body.get("messages") if is_chat else None
    messages = messages if isinstance(messages, list) else []
    steps = sum(
        1 for m in messages if isinstance(m, dict) and m.get("role") in ("assistant", "tool")
    )
    if steps >= options.agent_min_steps:
        return Classification(WorkloadClass.AGENT, f"{steps} assistant/tool messages in history")
    tools = body.get("tools") or body.get("functions")
    if tools or any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
        return Classification(WorkloadClass.TOOLS, "tools offered" if tools else "tool history")
    shared = _shared_prefix_chars(body, messages, is_chat, oracle)
    if shared is not None and shared >= options.long_prefix_min_chars:
        return Classification(WorkloadClass.LONG_PREFIX, f"{shared} chars of shared prefix")
    if is_chat:
        return Classification(WorkloadClass.CHAT, "plain chat")
    return Classification(WorkloadClass.COMPLETION, "plain completion")


def _shared_prefix_chars(
    body: Mapping[str, Any],
    messages: list[Any],
    is_chat: bool,
    oracle: PrefixOracle | None,
) -> int | None:
    if oracle is not None:
        found = oracle.shared_prefix_chars(body)
        if found is not None:
            return found
    if not is_chat:
        return None
    total = 0
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            break
        total += _content_chars(message.get("content"))
    return total


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(
            len(part["text"])
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return 0
