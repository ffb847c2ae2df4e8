"""Chained block hashing: batch, single and scalar forms agree; equal hashes mean equal prefixes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute.trace.hashing import (
    block_contents,
    chain_hashes,
    chain_hashes_batch,
    extend_chain,
    extend_chain_hashes,
    rechain_ids,
)

token_lists = st.lists(st.integers(0, 50_000), max_size=80)


def _arr(xs: list[int]) -> np.ndarray:
    return np.array(xs, dtype=np.uint32)


@given(token_lists, st.integers(1, 9))
def test_single_matches_scalar_chain(tokens: list[int], block_size: int) -> None:
    arr = _arr(tokens)
    expected: list[int] = []
    parent = None
    for start in range(0, len(arr) - block_size + 1, block_size):
        parent = extend_chain(parent, arr[start : start + block_size])
        expected.append(parent)
    assert chain_hashes(arr, block_size).tolist() == expected


@given(st.lists(token_lists, min_size=1, max_size=6), st.integers(1, 5))
def test_batch_matches_one_by_one(prompts: list[list[int]], block_size: int) -> None:
    arrays = [_arr(p) for p in prompts]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([a.shape[0] for a in arrays], out=offsets[1:])
    flat = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint32)
    hashes, block_offsets = chain_hashes_batch(flat, offsets, block_size)
    for i, a in enumerate(arrays):
        got = hashes[block_offsets[i] : block_offsets[i + 1]].tolist()
        assert got == chain_hashes(a, block_size).tolist()


@settings(max_examples=200)
@given(token_lists, token_lists, st.integers(1, 4))
def test_equal_hash_iff_equal_prefix(a: list[int], b: list[int], block_size: int) -> None:
    ha, hb = chain_hashes(_arr(a), block_size), chain_hashes(_arr(b), block_size)
    for i in range(min(len(ha), len(hb))):
        same_prefix = a[: (i + 1) * block_size] == b[: (i + 1) * block_size]
        assert (ha[i] == hb[i]) == same_prefix


def test_position_and_order_matter() -> None:
    # Same multiset of tokens in a different order, and a token moved across blocks.
    assert chain_hashes(_arr([1, 2, 3, 4]), 2)[1] != chain_hashes(_arr([3, 4, 1, 2]), 2)[1]
    assert block_contents(_arr([1, 2]), 2)[0] != block_contents(_arr([2, 1]), 2)[0]


def test_seed_separates_namespaces() -> None:
    t = _arr(list(range(32)))
    assert not np.array_equal(chain_hashes(t, 16, seed=1), chain_hashes(t, 16, seed=2))


def test_no_collisions_on_many_random_prefixes() -> None:
    rng = np.random.default_rng(7)
    tokens = rng.integers(
        0, 4, size=200_000, dtype=np.uint32
    )  # tiny alphabet, many near-duplicates
    hashes = chain_hashes(tokens, 1)
    assert np.unique(hashes).shape[0] == hashes.shape[0]


def test_rechain_ids_distinguishes_positions() -> None:
    ids = np.array([5, 5, 7, 5], dtype=np.uint64)
    out = rechain_ids(ids, np.array([0, 2], dtype=np.int64))
    # The second prompt [7, 5] shares no prefix with the first [5, 5].
    assert out[0] != out[2] and out[1] != out[3]
    same = rechain_ids(np.array([5, 5, 5, 5], dtype=np.uint64), np.array([0, 2], dtype=np.int64))
    assert same[0] == same[2] and same[1] == same[3]


@given(token_lists, st.integers(0, 80), st.integers(1, 9))
def test_extended_chain_equals_the_full_chain(tokens: list[int], cut: int, block_size: int) -> None:
    arr = _arr(tokens)
    known = chain_hashes(arr[: min(cut, len(arr))], block_size)
    assert (
        extend_chain_hashes(known, arr, block_size).tolist()
        == chain_hashes(arr, block_size).tolist()
    )
