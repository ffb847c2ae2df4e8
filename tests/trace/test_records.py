"""A hash-only trace must not mix forms or block sizes: the error names the line."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.analyze.run import analyze_requests
from kvroute.cache.replay.seq import SeqBuilder
from kvroute.errors import InputError
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt, block_prompts


def _blocks(n: int, block: int, line: int) -> Request:
    prompt = BlockPrompt(np.arange(1, n + 1, dtype=np.uint64), block, n * block)
    return Request(prompt=prompt, source_line=line)


def test_block_prompts_in_order() -> None:
    requests = [_blocks(2, 16, 1), _blocks(3, 16, 2)]
    assert block_prompts(requests, 16) == [r.prompt for r in requests]


@pytest.mark.parametrize(
    ("odd", "message"),
    [
        (Request(prompt=TokenPrompt(np.arange(5, dtype=np.uint32)), source_line=9), "cannot mix"),
        (_blocks(2, 32, 9), r"block size changes within the trace \(32 vs 16 tokens\)"),
    ],
    ids=["token prompt", "other block size"],
)
def test_a_mixed_hash_only_trace_names_the_line(odd: Request, message: str) -> None:
    requests = [_blocks(2, 16, 7), _blocks(1, 16, 8), odd]
    with pytest.raises(InputError, match=message) as err:
        block_prompts(requests, 16)
    assert err.value.line == 9
    # analyze and the replay's sequences both go through it
    with pytest.raises(InputError, match=message) as err:
        analyze_requests(
            requests, trace_path="t.jsonl", trace_format="kvroute", tokenizer_name=None
        )
    assert err.value.line == 9
    with pytest.raises(InputError, match=message) as err:
        SeqBuilder(16, block_size_tokens=16).build(requests, [0, 1, 2], [0, 0, 0])
    assert err.value.line == 9
