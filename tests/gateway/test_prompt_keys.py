"""A session's incremental chained hashes equal hashing the whole prompt, and never
change arrays handed out before."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute.cache.base import U64
from kvroute.gateway.prompt_keys import ChainExtender, SessionKeys, extends
from kvroute.trace.hashing import chain_hashes

UNITS = (1, 3, 16)

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
    handed_out: list[tuple[dict[int, U64], dict[int, U64]]] = []
    for kind, more, cut in session:
        tail = np.asarray(more, dtype=np.uint32)
        if kind == "extend":
            prompt = np.concatenate((prompt, tail))
        elif kind == "cut":
            prompt = np.concatenate((prompt[: min(cut, prompt.shape[0])], tail))
        else:
            prompt = tail
        got = keys.keys(prompt, UNITS, "s")
        for unit in UNITS:
            assert got[unit].tolist() == chain_hashes(prompt, unit).tolist()
        handed_out.append(({u: got[u].copy() for u in UNITS}, got))
    # Later turns write after earlier prompts' hashes, never over them.
    for copies, arrays in handed_out:
        for unit in UNITS:
            assert np.array_equal(copies[unit], arrays[unit])


def test_without_a_session_nothing_is_kept() -> None:
    keys = SessionKeys(max_sessions=1)
    tokens = np.arange(1, 100, dtype=np.uint32)
    assert keys.keys(tokens, (16,), None)[16].tolist() == chain_hashes(tokens, 16).tolist()
    keys.keys(tokens[:40], (16,), "a")
    keys.keys(tokens, (16,), "b")  # evicts "a" (LRU of one)
    again = keys.keys(tokens[:50], (1, 16), "a")
    assert again[1].tolist() == chain_hashes(tokens[:50], 1).tolist()


@given(st.lists(st.integers(0, 2**32 - 1), max_size=90), st.integers(0, 90))
def test_extender_continues_a_known_prefix(tokens: list[int], cut: int) -> None:
    arr = np.asarray(tokens, dtype=np.uint32)
    prefix = arr[: min(cut, arr.shape[0])]
    extender = ChainExtender()
    known = extender.extend(prefix, {}, UNITS, room=True)
    full = extender.extend(arr, known, UNITS)
    for unit in UNITS:
        assert full[unit].keys.tolist() == chain_hashes(arr, unit).tolist()
        assert known[unit].keys.tolist() == chain_hashes(prefix, unit).tolist()


def test_extends_compares_whole_prefixes() -> None:
    tokens = np.arange(1, 1000, dtype=np.uint32)
    assert extends(tokens, tokens[:10]) and extends(tokens, tokens)
    assert not extends(tokens[:10], tokens)
    assert not extends(tokens, np.array([1, 3], dtype=np.uint32))


def test_every_hashing_path_equals_the_whole_prompts_hashes() -> None:
    """Long tails (the closed-form chain), token ids past the first table (it grows)
    and past any table (hashed directly), at several units."""
    rng = np.random.default_rng(7)
    extender = ChainExtender()
    for high in (50_000, 300_000, 2**32):
        tokens = rng.integers(0, high, 3000, dtype=np.uint64).astype(np.uint32)
        for cut in (0, 1000, 2990):
            known = extender.extend(tokens[:cut], {}, (1, 3, 16), room=True)
            full = extender.extend(tokens, known, (1, 3, 16))
            for unit in (1, 3, 16):
                assert full[unit].keys.tolist() == chain_hashes(tokens, unit).tolist()
