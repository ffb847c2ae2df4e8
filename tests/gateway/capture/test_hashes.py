"""Capture's batch hashing, with prefix reuse, against the trace writer's hashes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from kvroute.gateway.capture.hashes import PrefixHasher
from kvroute.trace import hashing
from kvroute.trace.hashing import batch_block_hashes
from kvroute.trace.writer import prompt_block_hashes

ONE_BY_ONE = [
    False,
    pytest.param(
        True,
        marks=pytest.mark.skipif(not hashing.active(), reason="chainhash.c not built"),
    ),
]


@pytest.mark.parametrize("one_by_one", ONE_BY_ONE, ids=["numpy-batch", "c-one-by-one"])
@pytest.mark.parametrize("block_size_tokens", [16, 5, 1])
def test_prefix_reuse_gives_the_writers_hashes(block_size_tokens: int, one_by_one: bool) -> None:
    """Prompts that start like earlier ones (cut anywhere: inside a block, on a
    checkpoint, past it), across batches, hash exactly as the writer hashes them
    alone, with the JSON orjson gives them; and the later ones take their prefixes
    from the memo (batched with numpy, or one by one in C)."""
    rng = np.random.default_rng(7)
    shared = [rng.integers(0, 50_000, n).astype(np.uint32) for n in (130, 1030, 4100)]
    hasher = PrefixHasher(block_size_tokens, one_by_one=one_by_one)
    for _ in range(5):
        batch = []
        for _ in range(30):
            prefix = shared[int(rng.integers(0, len(shared)))]
            cut = int(rng.integers(0, prefix.shape[0] + 1))
            more = rng.integers(0, 50_000, int(rng.integers(0, 70))).astype(np.uint32)
            batch.append(np.concatenate((prefix[:cut], more)))
        batch.append(np.zeros(0, dtype=np.uint32))
        rendered = hasher.hashes_json(batch)
        got = [h for h, _ in rendered]
        assert [j for _, j in rendered] == [orjson.dumps(h) for h in got]  # JSON reused exactly
        assert got == batch_block_hashes(batch, block_size_tokens)
        assert got == [prompt_block_hashes(ids, block_size_tokens).tolist() for ids in batch]
    assert hasher.num_prefix_hits > 0


def test_memo_stays_within_its_bound() -> None:
    rng = np.random.default_rng(3)
    hasher = PrefixHasher(16, max_memo_bytes=64 * 1024, one_by_one=False)
    for _ in range(20):
        hasher.hashes([rng.integers(0, 50_000, 600).astype(np.uint32) for _ in range(10)])
    assert 0 < hasher._memo_bytes <= 64 * 1024


@pytest.mark.skipif(not hashing.active(), reason="chainhash.c not built")
def test_one_by_one_reuses_a_shared_system_prompt_across_conversations() -> None:
    """Conversations that alternate behind one system prompt reuse its hashes; a new
    version of the system prompt (a shorter common prefix) is hashed whole once and
    then reused; the memo of kept tokens stays within its bound."""
    rng = np.random.default_rng(11)
    system = rng.integers(0, 50_000, 1000).astype(np.uint32)
    hasher = PrefixHasher(16, one_by_one=True, max_memo_bytes=64 * 1024)
    prompts = []
    for turn in range(6):
        for conversation in range(3):
            tail = rng.integers(0, 50_000, 20 + 7 * turn + conversation).astype(np.uint32)
            prompts.append(np.concatenate((system, tail)))
    edited = system.copy()
    edited[600] += 1  # the system prompt's next version
    prompts += [
        np.concatenate((edited, rng.integers(0, 50_000, 30).astype(np.uint32))) for _ in range(3)
    ]
    for ids in prompts:
        hashes, rendered = hasher.hashes_json([ids])[0]
        assert hashes == prompt_block_hashes(ids, 16).tolist()
        assert rendered == orjson.dumps(hashes)
    assert hasher.num_prefix_hits >= len(prompts) - 4
    for _ in range(40):  # other system prompts push the oldest out
        hasher.hashes_json([rng.integers(0, 50_000, 900).astype(np.uint32)])
    assert 3 * hasher._lead_bytes <= 64 * 1024
