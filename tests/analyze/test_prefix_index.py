"""The prefix index gives the exact longest common prefix with any earlier prompt."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute.analyze.prefix_index import PrefixIndex, lcp_tokens_bruteforce
from kvroute.trace.hashing import chain_hashes

# Prompts built from a few shared stems so that long common prefixes actually occur.
stems = st.lists(st.lists(st.integers(0, 3), max_size=40), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    stems,
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 40), st.lists(st.integers(0, 3), max_size=20)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 8),
)
def test_token_lcp_is_exact(
    stem_list: list[list[int]], specs: list[tuple[int, int, list[int]]], block_size: int
) -> None:
    prompts = []
    for stem_i, cut, suffix in specs:
        stem = stem_list[stem_i % len(stem_list)]
        prompts.append(np.array(stem[:cut] + suffix, dtype=np.uint32))
    index = PrefixIndex(block_size, keep_tokens=True)
    got = [index.match_and_insert(chain_hashes(p, block_size), len(p), p) for p in prompts]
    expected = lcp_tokens_bruteforce(prompts)
    assert [m.matched_tokens for m in got] == expected
    assert [m.matched_blocks for m in got] == [e // block_size for e in expected]


def test_hash_only_matches_whole_blocks_and_caps_at_prompt_length() -> None:
    index = PrefixIndex(512, keep_tokens=False)
    first = index.match_and_insert(np.array([1, 2, 3], dtype=np.uint64), 1300)
    assert first.matched_tokens == 0 and first.deepest_block_hash is None
    again = index.match_and_insert(np.array([1, 2, 9], dtype=np.uint64), 1100)
    assert (again.matched_blocks, again.matched_tokens) == (2, 1024)
    whole = index.match_and_insert(np.array([1, 2, 3], dtype=np.uint64), 1300)
    # The repeated partial last block saves its 276 tokens, but is no whole block.
    assert (whole.matched_blocks, whole.matched_tokens, whole.deepest_block_hash) == (2, 1300, 2)
    assert index.num_unique_blocks == 4


def test_block_token_ids_recovers_prefix_text() -> None:
    index = PrefixIndex(4, keep_tokens=True)
    p = np.arange(10, dtype=np.uint32)
    keys = chain_hashes(p, 4)
    index.match_and_insert(keys, 10, p)
    assert index.block_token_ids(keys.tolist()) == list(range(8))
    assert index.block_token_ids([12345]) is None
