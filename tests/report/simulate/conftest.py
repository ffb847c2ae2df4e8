"""One simulation of a small token trace whose hits are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.result import SimulationResult
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate
from kvroute.trace.records import Request, TokenPrompt

SHARED = 96  # tokens every prompt starts with: six whole 16-token blocks
UNIQUE = 32
NUM_REQUESTS = 20
CACHED_TOKENS = (NUM_REQUESTS - 1) * SHARED
PROMPT_TOKENS = NUM_REQUESTS * (SHARED + UNIQUE)


def requests() -> list[Request]:
    shared = list(range(1, SHARED + 1))
    return [
        Request(
            prompt=TokenPrompt(
                np.array([*shared, *range(1000 + i * UNIQUE, 1000 + (i + 1) * UNIQUE)], np.uint32)
            ),
            arrival_s=10.0 * i,  # one at a time: every engine keeps the shared prefix
            end_s=10.0 * i + 1.0,
            output_len=4,
        )
        for i in range(NUM_REQUESTS)
    ]


@pytest.fixture(scope="package")
def simulation() -> SimulationResult:
    result = simulate(
        requests(),
        capacity_from_tokens(1 << 16),
        TraceSource("shared.jsonl", "kvroute"),
        options=SimulateOptions(sweep_capacities=(64, 1 << 16)),
    )
    assert [e.cached_tokens for e in result.engines] == [CACHED_TOKENS] * 3
    return result
