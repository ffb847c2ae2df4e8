"""A generated workload as a trace: what ``kvroute analyze`` reads, to check its overlap.

:func:`log_records` gives OpenAI request-log records (``kvroute bench generate`` writes
them as JSONL, which ``analyze`` reads); :func:`trace_requests` gives the same requests
as :class:`~kvroute.trace.records.Request` objects for :func:`analyze_workload`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from kvroute.analyze.result import AnalysisResult
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.bench.workloads.base import Api, BenchRequest, StructuredKind
from kvroute.trace.records import (
    ChatPrompt,
    Request,
    RequestAttrs,
    StructuredOutput,
    TextPrompt,
    TokenPrompt,
    as_token_ids,
)
from kvroute.trace.tokenize import tokenize_requests
from kvroute.trace.tokenizer import ChatTokenizer

_STRUCTURED = {
    StructuredKind.NONE: StructuredOutput.NONE,
    StructuredKind.JSON_SCHEMA: StructuredOutput.JSON_SCHEMA,
    StructuredKind.TOOL_ARGS: StructuredOutput.JSON_SCHEMA,
}


def log_records(requests: Sequence[BenchRequest], *, model: str) -> Iterator[dict[str, Any]]:
    """One OpenAI-log record per request: the body as sent, with its offset as timestamp."""
    for r in requests:
        body = {"model": model, **r.body, "max_tokens": r.max_tokens}
        rec: dict[str, Any] = {"request": body}
        rec["timestamp"] = r.arrival_s if r.arrival_s is not None else float(r.index)
        if r.session_id is not None:
            rec["session_id"] = r.session_id
        yield rec


def trace_requests(requests: Sequence[BenchRequest]) -> list[Request]:
    """The requests as trace records (chat or text prompts, not yet tokenized)."""
    out = []
    for r in requests:
        if r.api is Api.CHAT:
            prompt: ChatPrompt | TextPrompt | TokenPrompt = ChatPrompt(
                r.body["messages"], r.body.get("tools")
            )
        elif isinstance(r.body["prompt"], str):
            prompt = TextPrompt(r.body["prompt"])
        else:
            prompt = TokenPrompt(as_token_ids(r.body["prompt"]))
        out.append(
            Request(
                prompt=prompt,
                arrival_s=r.arrival_s if r.arrival_s is not None else float(r.index),
                session_id=r.session_id,
                output_len=r.max_tokens,
                attrs=RequestAttrs(
                    has_tools="tools" in r.body,
                    structured_output=_STRUCTURED[r.structured],
                    num_messages=len(r.body["messages"]) if r.api is Api.CHAT else None,
                ),
                source_line=r.index + 1,
            )
        )
    return out


def analyze_workload(
    requests: Sequence[BenchRequest],
    tokenizer: ChatTokenizer,
    tokenizer_source: str | None = None,
    *,
    options: AnalyzeOptions | None = None,
) -> AnalysisResult:
    """Run ``analyze`` over a generated workload, tokenized as the engine sees it."""
    tokenized = tokenize_requests(trace_requests(requests), tokenizer_source, workers=1)
    return analyze_requests(
        tokenized,
        trace_path="<generated>",
        trace_format="kvroute.bench",
        tokenizer_name=tokenizer.name,
        options=options,
        decode=None,
    )
