"""Classes as the gateway labels them, hash-only labels, tenant isolation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvroute.advise.workload import classify_request, isolate_tenants, split_by_class
from kvroute.analyze.run import analyze_requests
from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.routing.classify import classify
from kvroute.gateway.types import WorkloadClass
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.readers import read_trace
from kvroute.trace.records import BlockPrompt, Request, RequestAttrs, StructuredOutput, TokenPrompt

U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "ok"}
BODIES: list[dict[str, Any]] = [
    {
        "messages": [U],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
    },
    {"messages": [U, A, U, A, U, A, U, A, U]},
    {"messages": [U], "tools": [{"type": "function", "function": {"name": "f"}}]},
    {"messages": [{"role": "system", "content": "s" * 5000}, U]},
    {"messages": [U]},
    {"prompt": "complete this"},
    {"messages": [U, A, {"role": "tool", "content": "r", "tool_call_id": "1"}, U]},
]


def test_trace_requests_get_the_gateways_class(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in BODIES))
    opts = ClassifyOptions()
    got = [classify_request(r, opts) for r in read_trace(path, "openai", options=ReadOptions())]
    want = [classify(b, is_chat="messages" in b, options=opts).workload for b in BODIES]
    assert got == want
    assert set(got) == set(WorkloadClass)


def block(n: int, **attrs: Any) -> Request:
    return Request(
        BlockPrompt(np.arange(n, dtype=np.uint64), 16, 16 * n), attrs=RequestAttrs(**attrs)
    )


def test_hash_only_requests_are_labelled_from_their_attributes() -> None:
    opts = ClassifyOptions()
    assert (
        classify_request(block(2, structured_output=StructuredOutput.JSON_OBJECT), opts)
        is WorkloadClass.STRUCTURED
    )
    assert classify_request(block(2, turn_index=4, num_messages=9), opts) is WorkloadClass.AGENT
    assert (
        classify_request(block(2, has_tools=True, turn_index=1, num_messages=3), opts)
        is WorkloadClass.TOOLS
    )
    assert classify_request(block(2, turn_index=0, num_messages=1), opts) is WorkloadClass.CHAT
    assert classify_request(block(2), opts) is WorkloadClass.COMPLETION


def test_split_by_class_is_largest_first() -> None:
    reqs = [block(1) for _ in range(5)]
    labels = [
        WorkloadClass.CHAT,
        WorkloadClass.AGENT,
        WorkloadClass.AGENT,
        WorkloadClass.CHAT,
        WorkloadClass.AGENT,
    ]
    out = split_by_class(reqs, labels)
    assert [c.workload for c in out] == [WorkloadClass.AGENT, WorkloadClass.CHAT]
    assert out[0].share_of_requests == 0.6


def overlap(requests: list[Request]) -> float:
    return analyze_requests(
        requests, trace_path="t", trace_format="x", tokenizer_name=None
    ).overlap.hit_ratio


def test_isolated_tenants_share_nothing_across_and_everything_within() -> None:
    shared = np.arange(200, dtype=np.uint32)
    tokens = [Request(TokenPrompt(shared.copy()), user_id=f"u{i % 2}") for i in range(6)]
    assert overlap(tokens) == pytest.approx(5 / 6)
    # each tenant's first prompt is cold, its next two reuse all of it (salt token included)
    assert overlap(isolate_tenants(tokens)) == pytest.approx(4 / 6)
    hashes = [
        Request(BlockPrompt(np.arange(4, dtype=np.uint64), 16, 64), user_id=f"u{i % 2}")
        for i in range(6)
    ]
    iso_h = isolate_tenants(hashes)
    assert overlap(hashes) == 5 / 6
    assert overlap(iso_h) == 4 / 6
