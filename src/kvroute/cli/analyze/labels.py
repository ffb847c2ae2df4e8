"""``kvroute analyze``'s workload classes: the gateway's classification of each request,
taken from the stream before tokenization, for the reuse breakdown."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.routing.classify import classify
from kvroute.trace.records import ChatPrompt, Request, StructuredOutput, TextPrompt

# A request body field that makes classify() see the structured output the reader found.
_STRUCTURED_BODY: dict[StructuredOutput, dict[str, Any]] = {
    StructuredOutput.NONE: {},
    StructuredOutput.JSON_OBJECT: {"response_format": {"type": "json_object"}},
    StructuredOutput.JSON_SCHEMA: {"response_format": {"type": "json_schema"}},
    StructuredOutput.REGEX: {"guided_regex": ""},
    StructuredOutput.GRAMMAR: {"guided_grammar": ""},
    StructuredOutput.CHOICE: {"guided_choice": []},
}


def request_class(request: Request, options: ClassifyOptions) -> str | None:
    """The gateway's workload class of ``request`` (``None`` for a prompt known only as
    tokens or hashes: the rules read the request body)."""
    p = request.prompt
    body: dict[str, Any]
    if isinstance(p, ChatPrompt):
        body = {"messages": p.messages, "tools": p.tools}
    elif isinstance(p, TextPrompt):
        body = {"prompt": p.text}
    else:
        return None
    body.update(_STRUCTURED_BODY[request.attrs.structured_output])
    return classify(body, is_chat=isinstance(p, ChatPrompt), options=options).workload.value


class ClassLabels:
    """One class label per request of the stream, in order (filled as it passes)."""

    def __init__(self, options: ClassifyOptions | None = None) -> None:
        self.options = options or ClassifyOptions()
        self.labels: list[str | None] = []

    def wrap(self, stream: Iterable[Request]) -> Iterator[Request]:
        for r in stream:
            self.labels.append(request_class(r, self.options))
            yield r
