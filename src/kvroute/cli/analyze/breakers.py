"""``kvroute analyze``'s cache-breaker pass: the text prompts kept while the trace
streams by, then found, fixed and replayed (ideal and each engine's model)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial

from kvroute.analyze.breaker_cost import BreakersResult, EngineReplay, measure_breakers
from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate
from kvroute.trace.records import ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.trace.tokenize import encode_prompt
from kvroute.trace.tokenizer import ChatTokenizer
from kvroute.types import TokenIds

MAX_REQUESTS = 10_000
"""Requests whose text is kept for the breaker pass (the first ones of a longer trace):
each candidate re-encodes and replays them."""
DEFAULT_CAPACITY_TOKENS = 256 * 1024
BREAKER_ENGINES = ("llamacpp", "vllm", "sglang")


class KeptPrompts:
    """The first ``limit`` requests as read and their token ids as tokenized, taken
    from the two streams as they pass (the streams themselves are unchanged). A request
    whose prompt came tokenized carries no text, so no candidate."""

    def __init__(self, limit: int = MAX_REQUESTS) -> None:
        self.limit = limit
        self.requests: list[Request] = []
        self.token_ids: list[TokenIds] = []

    def raw(self, stream: Iterable[Request]) -> Iterator[Request]:
        for r in stream:
            if len(self.requests) < self.limit:
                self.requests.append(r)
            yield r

    def tokens(self, stream: Iterable[Request]) -> Iterator[Request]:
        for r in stream:
            if len(self.token_ids) < self.limit and isinstance(r.prompt, TokenPrompt):
                self.token_ids.append(r.prompt.token_ids)
            yield r


def engine_replay(requests: list[Request], capacity_tokens: int) -> EngineReplay:
    """Each engine model's hit on ``requests`` re-encoded as the given token ids."""
    capacity = capacity_from_tokens(capacity_tokens)
    options = SimulateOptions(engines=BREAKER_ENGINES)
    source = TraceSource("<breakers>", "tokens")

    def run(token_ids: list[TokenIds]) -> dict[str, float]:
        tokenized = [
            replace(r, prompt=TokenPrompt(ids)) for r, ids in zip(requests, token_ids, strict=True)
        ]
        result = simulate(tokenized, capacity, source, options=options)
        return {e.engine: e.hit_ratio for e in result.engines}

    return run


def find_breakers(
    kept: KeptPrompts,
    tokenizer: ChatTokenizer,
    *,
    block_size_tokens: int,
    capacity_tokens: int | None,
    with_text: bool,
) -> BreakersResult | None:
    """The breaker findings of the kept requests; ``None`` when none were kept (a
    hash-only or pre-tokenized trace). ``capacity_tokens=None``: ideal figures only."""
    if len(kept.token_ids) != len(kept.requests) or not any(
        isinstance(r.prompt, ChatPrompt | TextPrompt) for r in kept.requests
    ):
        return None
    replay = engine_replay(kept.requests, capacity_tokens) if capacity_tokens is not None else None
    return measure_breakers(
        kept.requests,
        kept.token_ids,
        partial(encode_prompt, tokenizer),
        block_size_tokens=block_size_tokens,
        replay=replay,
        capacity_tokens=capacity_tokens,
        with_text=with_text,
    )
