"""``json``: structured-output requests with schemas of varying depth.

Each request asks for one record as JSON: most through ``response_format`` with a
``json_schema`` (the engine constrains decoding), a share (``tool_share``) through a
forced tool call whose ``function.arguments`` must match the tool's parameters. The
schema is drawn per request with a depth in ``[min_depth, max_depth]``; the answer is
checked for JSON parse and schema validity after the run. A shared instruction
prefix of ``overlap`` of the mean prompt precedes each request's own source text.
Engines that ignore ``tools`` (llama.cpp with a template without tool support, such as
SmolLM2's) answer tool requests in prose, which the metrics count as not parsed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvroute.bench.workloads.base import (
    BenchRequest,
    Draft,
    GenContext,
    StructuredKind,
    finish,
    fit_prompt_mean,
    lognormal_len,
)
from kvroute.bench.workloads.params import check, param
from kvroute.bench.workloads.schemas import make_schema


@dataclass(frozen=True, slots=True)
class JsonWorkload:
    prompt_tokens: int = param(384, "mean prompt length, tokens")
    overlap: float = param(
        0.3, "target share of prompt tokens in the shared instructions, in [0, 0.95]"
    )
    min_depth: int = param(1, "shallowest schema nesting")
    max_depth: int = param(4, "deepest schema nesting")
    width: int = param(3, "properties per object")
    tool_share: float = param(0.0, "share of requests asking through a forced tool call")
    output_tokens: int = param(192, "max_tokens of each answer")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(
            1 <= self.min_depth <= self.max_depth <= 8, "json: need 1 ≤ min_depth ≤ max_depth ≤ 8"
        )
        check(0.0 <= self.overlap <= 0.95, "json: overlap must be in [0, 0.95]")
        check(0.0 <= self.tool_share <= 1.0, "json: tool_share must be in [0, 1]")
        head = "Extract the requested record from the text. Answer with JSON only. "
        drafts = fit_prompt_mean("json", self, num_requests, ctx, head)
        return finish("json", drafts, ctx.tokenizer)

    def drafts(self, own_tokens: int, num_requests: int, ctx: GenContext, head: str) -> list[Draft]:
        """Requests whose user messages (source text and schema) come to about ``own``
        tokens each."""
        text, rng = ctx.text, ctx.rng
        drafts = []
        for _ in range(num_requests):
            depth = int(rng.integers(self.min_depth, self.max_depth + 1))
            schema = make_schema(rng, depth, self.width)
            schema_text = "\n\nSchema: " + json.dumps(schema, separators=(",", ":"))
            n = lognormal_len(rng, max(8, own_tokens - ctx.num_tokens(schema_text)), 0.3, lo=8)
            user = f"{text.tag('Source ')}: {text.tokens(n)}{schema_text}"
            body: dict[str, Any] = {
                "messages": [{"role": "system", "content": head}, {"role": "user", "content": user}]
            }
            if rng.random() < self.tool_share:
                body["tools"] = [
                    {"type": "function", "function": {"name": "emit_record", "parameters": schema}}
                ]
                body["tool_choice"] = {"type": "function", "function": {"name": "emit_record"}}
                kind = StructuredKind.TOOL_ARGS
            else:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "record", "strict": True, "schema": schema},
                }
                kind = StructuredKind.JSON_SCHEMA
            drafts.append(
                Draft(body=body, max_tokens=self.output_tokens, structured=kind, schema=schema)
            )
        return drafts
