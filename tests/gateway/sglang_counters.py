"""The engines' own request counters, read from their ``/metrics``, for tests that must
show which engine a request reached without trusting the gateway's headers.

- llama-server: ``llamacpp:tokens_predicted_total`` (generated tokens of finished
  requests; it has no request counter), compared with the answers' ``completion_tokens``;
- vLLM: ``vllm:request_success_total`` (finished requests);
- SGLang: ``sglang:num_requests_total`` (finished requests) and
  ``sglang:num_so_requests_total`` (those with structured output).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from kvroute.engines.http import counter_value, get_metrics
from kvroute.engines.state import EngineRecord

COUNTERS = {
    "llamacpp": ("llamacpp:tokens_predicted_total",),
    "vllm": ("vllm:request_success_total",),
    "sglang": ("sglang:num_requests_total", "sglang:num_so_requests_total"),
}


def read_counters(records: Sequence[EngineRecord]) -> dict[str, int]:
    """Every counter of :data:`COUNTERS` for the records' engines, summed over records;
    a counter an engine does not serve yet (SGLang's appear after the first request)
    reads 0."""

    async def scrape() -> dict[str, int]:
        totals: dict[str, int] = {}
        async with httpx.AsyncClient() as client:
            for record in records:
                metrics = await get_metrics(client, record.base_url)
                for name in COUNTERS[record.engine]:
                    totals[name] = totals.get(name, 0) + (counter_value(metrics, name) or 0)
        return totals

    return asyncio.run(scrape())


def counter_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before.get(name, 0) for name in after}


def completion_tokens(raws: Sequence[Any]) -> int:
    """Σ ``usage.completion_tokens`` of ``with_raw_response`` answers (llama-server's
    ``tokens_predicted_total`` counts the same tokens)."""
    total = 0
    for raw in raws:
        usage = raw.parse().usage
        assert usage is not None, "the answer has no usage"
        total += usage.completion_tokens
    return total
