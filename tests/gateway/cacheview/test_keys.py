"""A session's incremental chained hashes equal hashing the whole prompt, and never
change arrays handed out before."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute.cache.base import U64
from kvroute.gateway.cacheview.keys import SessionKeys, extends
from kvroute.gateway.cacheview.view import unit_keys
from kvroute.trace.hashing import ChainExtender, chain_hashes

# A session's turns: each either extends the previous prompt (the usual chat turn),
# restarts from a prefix of it (an edited conversation), or is a new prompt.
turns = st.lists(
    st.tuples(
        st.sampled_from(["extend", "cut", "new"]),
        st.lists(st.integers(0, 60_000), max_size=70),
        st.integers(0, 200),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(turns)
def test_session_keys_equal_the_whole_prompts_hashes(
    session: list[tuple[str, list[int], int]],
) -> None:
    keys = SessionKeys()
    prompt = np.zeros(0, dtype=np.uint32)
    handed_out: list[tuple[U64, U64]] = []
    for kind, more, cut in session:
        tail = np.asarray(more, dtype=np.uint32)
        if kind == "extend":
            prompt = np.concatenate((prompt, tail))
        elif kind == "cut":
            prompt = np.concatenate((prompt[: min(cut, prompt.shape[0])], tail))
        else:
            prompt = tail
        got = keys.keys(prompt, "s")
        assert got.tolist() == chain_hashes(prompt, 1).tolist()
        handed_out.append((got.copy(), got))
    # Later turns write after earlier prompts' hashes, never over them.
    for copy, array in handed_out:
        assert np.array_equal(copy, array)


def test_without_a_session_nothing_is_kept() -> None:
    keys = SessionKeys(max_sessions=1)
    tokens = np.arange(1, 100, dtype=np.uint32)
    assert keys.keys(tokens, None).tolist() == chain_hashes(tokens, 1).tolist()
    keys.keys(tokens[:40], "a")
    keys.keys(tokens, "b")  # evicts "a" (LRU of one)
    assert keys.keys(tokens[:50], "a").tolist() == chain_hashes(tokens[:50], 1).tolist()


@given(st.lists(st.integers(0, 2**32 - 1), max_size=90), st.integers(0, 90))
def test_extender_continues_a_known_prefix(tokens: list[int], cut: int) -> None:
    arr = np.asarray(tokens, dtype=np.uint32)
    prefix = arr[: min(cut, arr.shape[0])]
    extender = ChainExtender()
    known = extender.extend(prefix, None, room=True)
    full = extender.extend(arr, known)
    assert full.keys.tolist() == chain_hashes(arr, 1).tolist()
    assert known.keys.tolist() == chain_hashes(prefix, 1).tolist()


def test_extends_compares_whole_prefixes() -> None:
    tokens = np.arange(1, 1000, dtype=np.uint32)
    assert extends(tokens, tokens[:10]) and extends(tokens, tokens)
    assert not extends(tokens[:10], tokens)
    assert not extends(tokens, np.array([1, 3], dtype=np.uint32))


def test_every_hashing_path_equals_the_whole_prompts_hashes() -> None:
    """Long tails (the power tables grow), token ids past the first table (it grows)
    and past any table (hashed directly)."""
    rng = np.random.default_rng(7)
    extender = ChainExtender()
    for high in (50_000, 300_000, 2**32):
        tokens = rng.integers(0, high, 3000, dtype=np.uint64).astype(np.uint32)
        for cut in (0, 1000, 2990):
            known = extender.extend(tokens[:cut], None, room=True)
            full = extender.extend(tokens, known)
            assert full.keys.tolist() == chain_hashes(tokens, 1).tolist()


@given(st.lists(st.integers(0, 60_000), max_size=200), st.sampled_from([1, 2, 16, 32]))
def test_unit_keys_are_the_one_block_hash(tokens: list[int], unit: int) -> None:
    """A model's keys at its unit are ``chain_hashes`` at that unit (whether the caller
    passes the per-token chain or not), so they agree with capture's and the traffic
    window's keys."""
    a = np.asarray(tokens, dtype=np.uint32)
    want = chain_hashes(a, unit).tolist()
    assert unit_keys(a, unit).tolist() == want
    assert unit_keys(a, unit, chain_hashes(a, 1)).tolist() == want
