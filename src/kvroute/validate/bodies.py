"""What to send an engine for one trace request, and what to read from its answer.

Engine quirks the adapters do not cover are read here: the request fields that make an
engine return the generated ids, llama.cpp's ``timings`` and slot ids. Pure: no network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kvroute.engines.base import EngineAdapter
from kvroute.errors import EngineError, InputError
from kvroute.trace.records import ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.types import JSONValue, TokenIds
from kvroute.validate.result import Answer, CompletionPath, Served


def request_body(
    req: Request, *, engine: str, model: str, max_tokens: int
) -> tuple[CompletionPath, dict[str, JSONValue]]:
    """The endpoint and body for ``req``: greedy, ``max_tokens`` long, with the fields that
    make ``engine`` cache the prompt and return the generated ids. Raises ``InputError``
    for a hash-only prompt, which no engine can be sent."""
    p = req.prompt
    body: dict[str, JSONValue] = {"model": model, "max_tokens": max_tokens, "temperature": 0.0}
    if isinstance(p, ChatPrompt):
        endpoint = CompletionPath.CHAT
        body["messages"] = p.messages
        if p.tools:
            body["tools"] = p.tools
    elif isinstance(p, TextPrompt):
        endpoint = CompletionPath.COMPLETIONS
        body["prompt"] = p.text
    elif isinstance(p, TokenPrompt):
        endpoint = CompletionPath.COMPLETIONS
        body["prompt"] = p.token_ids.tolist()
    else:
        raise InputError(
            "a hash-only prompt cannot be sent to an engine",
            line=req.source_line,
            hint="validate with a trace that has the prompts (chat, text or token ids)",
        )
    if engine == "llamacpp":
        # verbose + return_tokens put the generated ids in __verbose.tokens.
        body.update({"cache_prompt": True, "return_tokens": True, "verbose": True})
    elif engine in ("vllm", "sglang"):
        body["return_token_ids"] = True
    return endpoint, body


def _ids(value: Any) -> TokenIds | None:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        return None
    return np.asarray(value, dtype=np.uint32)


def read_answer(adapter: EngineAdapter, answer: Answer) -> Served:
    """The cache reading, output and tokenized prompt of one answer. Raises ``EngineError``
    when the answer carries no cache reading (the engine lacks the flag that adds it)."""
    body = answer.body
    usage = adapter.response_cache_usage(body)
    if usage is None:
        raise EngineError(
            f"{adapter.base_url} answered without cached-token counts",
            hint="vLLM needs --enable-prompt-tokens-details",
        )
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    verbose = body.get("__verbose")
    out_ids = None
    if isinstance(choice, Mapping):
        # vLLM and SGLang's completions: token_ids; SGLang's chat: response_token_ids.
        out_ids = _ids(choice.get("token_ids"))
        if out_ids is None:
            out_ids = _ids(choice.get("response_token_ids"))
    if out_ids is None and isinstance(verbose, Mapping):
        out_ids = _ids(verbose.get("tokens"))
    prompt_ids = _ids(body.get("prompt_token_ids"))
    if prompt_ids is None and isinstance(choice, Mapping):
        prompt_ids = _ids(choice.get("prompt_token_ids"))
    raw_usage = body.get("usage")
    completion = raw_usage.get("completion_tokens") if isinstance(raw_usage, Mapping) else None
    n_out = (
        len(out_ids) if out_ids is not None else completion if isinstance(completion, int) else 0
    )
    timings = body.get("timings")
    busy_ms = 0.0
    if isinstance(timings, Mapping):
        busy_ms = sum(float(timings.get(k) or 0.0) for k in ("prompt_ms", "predicted_ms"))
    slot = verbose.get("id_slot") if isinstance(verbose, Mapping) else None
    return Served(
        sent_s=answer.sent_s,
        done_s=answer.done_s,
        started_s=max(answer.sent_s, answer.done_s - busy_ms / 1000.0)
        if busy_ms
        else answer.sent_s,
        slot_id=slot if isinstance(slot, int) else None,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        output_tokens=n_out,
        output_token_ids=out_ids,
        prompt_token_ids=prompt_ids,
    )
