"""Request bodies per endpoint and engine, and what is read from each engine's answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest

from kvroute.engines.llamacpp import LlamaCppAdapter
from kvroute.engines.sglang import SglangAdapter
from kvroute.engines.vllm import VllmAdapter
from kvroute.errors import InputError
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.validate.bodies import read_answer, request_body
from kvroute.validate.result import Answer, CompletionPath, Served


def test_request_bodies_per_endpoint_and_engine() -> None:
    chat = Request(
        prompt=ChatPrompt([{"role": "user", "content": "hi"}], tools=[{"type": "function"}])
    )
    endpoint, body = request_body(chat, engine="llamacpp", model="m", max_tokens=8)
    assert endpoint is CompletionPath.CHAT
    assert body["max_tokens"] == 8 and body["temperature"] == 0.0 and body["tools"]
    assert body["cache_prompt"] is True and body["return_tokens"] is True
    endpoint, body = request_body(
        Request(prompt=TextPrompt("x")), engine="vllm", model="m", max_tokens=2
    )
    assert (
        endpoint is CompletionPath.COMPLETIONS
        and body["prompt"] == "x"
        and body["return_token_ids"]
    )
    toks = Request(prompt=TokenPrompt(np.array([5, 6], dtype=np.uint32)))
    assert request_body(toks, engine="vllm", model="m", max_tokens=1)[1]["prompt"] == [5, 6]
    blocks = Request(prompt=BlockPrompt(np.array([1], dtype=np.uint64), 16, 16))
    with pytest.raises(InputError):
        request_body(blocks, engine="vllm", model="m", max_tokens=1)


async def _read(
    adapter: type[LlamaCppAdapter] | type[VllmAdapter] | type[SglangAdapter],
    body: dict[str, Any],
) -> Served:
    async with httpx.AsyncClient() as client:
        return read_answer(adapter("http://x", client=client), Answer(1.0, 3.0, body))


def test_read_answer_llamacpp_and_vllm() -> None:
    llama = {
        "usage": {
            "prompt_tokens": 25,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 24},
        },
        "timings": {"cache_n": 24, "prompt_n": 1, "prompt_ms": 100.0, "predicted_ms": 400.0},
        "__verbose": {"tokens": [7, 8, 9], "id_slot": 2},
    }
    s = asyncio.run(_read(LlamaCppAdapter, llama))
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens, s.slot_id) == (25, 24, 3, 2)
    assert s.started_s == pytest.approx(2.5) and s.output_token_ids is not None
    vllm = {
        "choices": [{"token_ids": [1, 2]}],
        "prompt_token_ids": [4, 5, 6],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    s = asyncio.run(_read(VllmAdapter, vllm))
    assert s.started_s == 1.0 and s.slot_id is None
    assert s.prompt_token_ids is not None and s.prompt_token_ids.tolist() == [4, 5, 6]


def test_sglang_asks_for_and_reads_token_ids() -> None:
    chat = Request(prompt=ChatPrompt([{"role": "user", "content": "hi"}]))
    assert request_body(chat, engine="sglang", model="m", max_tokens=4)[1]["return_token_ids"]
    # SGLang 0.5.23's chat answer: the ids on the choice, the output as response_token_ids.
    body = {
        "choices": [{"prompt_token_ids": [1, 2, 3], "response_token_ids": [7, 8]}],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 2},
        },
    }
    s = asyncio.run(_read(SglangAdapter, body))
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens) == (3, 2, 2)
    assert s.output_token_ids is not None and s.output_token_ids.tolist() == [7, 8]
    assert s.prompt_token_ids is not None and s.prompt_token_ids.tolist() == [1, 2, 3]
