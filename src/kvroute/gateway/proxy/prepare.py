"""Reading a client's request body and building the one sent upstream. Pure.

The gateway checks what it needs to route, and what engines answer with a 500 (in
their own error shape) instead of a 400: a JSON object; ``messages`` of objects with
a string ``role``, a ``name`` (when given) that is a string, and a ``content`` that
is a string, null or an array of parts
(objects with a string ``type``; a ``text`` part's ``text`` a string), or ``prompt``;
a string ``model``; a boolean ``stream``; ``tools``, when given, an array of objects
each with ``type`` "function" and a ``function`` object whose ``name`` is a non-empty string.
Every other field goes upstream byte for byte: no renaming (SGLang's router turns
``max_tokens`` into ``max_completion_tokens``, which some servers ignore), no
dropping. Two changes are made, both on purpose:

- ``stream_options.include_usage`` is added to a streaming request that did not ask
  for it, so the gateway can count tokens; the relay removes that usage again
  (see sse.py). Added by splicing the raw bytes when the body has no
  ``stream_options``, by re-encoding when it has one.
- ``model`` is replaced when a route maps an alias to the backend's model name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import orjson

from kvroute.gateway.errors import bad_request

_INJECTED = b'"stream_options":{"include_usage":true},'


class CompletionPath(enum.Enum):
    """The two completion endpoints, by their path."""

    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"


@dataclass(frozen=True, slots=True)
class ClientBody:
    """A validated request body: the raw bytes and what routing needs from them."""

    raw: bytes
    data: dict[str, Any]
    path: CompletionPath
    model: str
    stream: bool
    wants_usage: bool


def parse_body(raw: bytes, path: CompletionPath) -> ClientBody:
    """Decode and check ``raw``; raise a 400 :class:`GatewayError` naming the field."""
    if not raw.strip():
        raise bad_request("the request body is empty; send a JSON object")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be a JSON object, not {type(data).__name__}")
    model = data.get("model")
    if model is None or model == "":
        raise bad_request("'model' is required: name the model to use", param="model")
    if not isinstance(model, str):
        raise bad_request("'model' must be a string", param="model")
    if path is CompletionPath.CHAT:
        _check_messages(data.get("messages"))
        _check_tools(data.get("tools"))
    elif not isinstance(data.get("prompt"), str | list):
        raise bad_request("'prompt' must be a string or an array", param="prompt")
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", param="stream")
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    wants_usage = bool(options.get("include_usage")) if options else False
    return ClientBody(raw, data, path, model, stream, wants_usage)


def _check_messages(messages: object) -> None:
    """What every engine needs of ``messages`` (they answer 500, not 400, without it)."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}] must be an object", param=f"messages[{i}]")
        if not isinstance(m.get("role"), str):
            raise bad_request(
                f"messages[{i}] needs a string 'role' (system, user, assistant or tool)",
                param=f"messages[{i}].role",
            )
        if "name" in m and not isinstance(m["name"], str):
            # llama-server: 500 "type must be string" (found by test_fuzz_openapi.py)
            raise bad_request(f"messages[{i}].name must be a string", param=f"messages[{i}].name")
        _check_content(m.get("content"), f"messages[{i}].content")


def _check_content(content: object, where: str) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string, null or an array of parts", param=where)
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise bad_request(
                f"{where}[{j}] must be an object with a string 'type'", param=f"{where}[{j}]"
            )
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise bad_request(
                f"{where}[{j}] is a text part: its 'text' must be a string",
                param=f"{where}[{j}].text",
            )


def _check_tools(tools: object) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array of objects", param="tools")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{i}] must be an object", param=f"tools[{i}]")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise bad_request(
                f"tools[{i}] needs a 'function' object "
                '({"type": "function", "function": {"name": ...}})',
                param=f"tools[{i}].function",
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(
                f"tools[{i}].function.name must be a non-empty string",
                param=f"tools[{i}].function.name",
            )
        if tool.get("type") != "function":
            # llama-server: 500 "Missing tool type" / "Unsupported tool type" (found by
            # tests/gateway/test_fuzz_openapi.py)
            raise bad_request(f'tools[{i}].type must be "function"', param=f"tools[{i}].type")


def upstream_body(body: ClientBody, *, inject_usage: bool, model: str | None) -> bytes:
    """The bytes to send upstream: ``body.raw`` unless a change is needed (see above)."""
    rename = model is not None and model != body.model
    if not inject_usage and not rename:
        return body.raw
    if inject_usage and not rename and "stream_options" not in body.data:
        start = body.raw.index(b"{") + 1
        return body.raw[:start] + _INJECTED + body.raw[start:]
    data = dict(body.data)
    if inject_usage:
        data["stream_options"] = {**(body.data.get("stream_options") or {}), "include_usage": True}
    if rename:
        data["model"] = model
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes (255)
        raise bad_request(f"the request body cannot be forwarded: {exc}") from None
