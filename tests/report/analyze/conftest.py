"""One analysis of a small token trace whose figures are known by construction."""

from __future__ import annotations

import pytest

from kvroute.analyze.result import AnalysisResult
from kvroute.analyze.run import analyze_requests
from kvroute.trace.records import Request, TokenPrompt, as_token_ids

SHARED = list(range(1, 97))  # 96 tokens every prompt starts with
NUM_REQUESTS = 20
UNIQUE = 32
HIT_RATIO = (NUM_REQUESTS - 1) * len(SHARED) / (NUM_REQUESTS * (len(SHARED) + UNIQUE))


def requests() -> list[Request]:
    return [
        Request(
            prompt=TokenPrompt(
                as_token_ids([*SHARED, *range(1000 + i * UNIQUE, 1000 + (i + 1) * UNIQUE)])
            ),
            arrival_s=float(i),
            model="model-a" if i % 2 == 0 else "model-b",
            session_id=f"s{i}",
            output_len=8,
        )
        for i in range(NUM_REQUESTS)
    ]


@pytest.fixture(scope="package")
def analysis() -> AnalysisResult:
    result = analyze_requests(
        requests(), trace_path="shared.jsonl", trace_format="kvroute", tokenizer_name=None
    )
    assert result.overlap.hit_ratio == pytest.approx(HIT_RATIO)
    return result
