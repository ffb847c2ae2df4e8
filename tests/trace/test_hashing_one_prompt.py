"""The one-prompt block hash in C gives the trace writer's hashes, for every integer
dtype, block size and parent; a missing, stale or disabled build falls back to numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvroute import _accel
from kvroute.trace import hashing
from kvroute.trace.hashing import DEFAULT_SEED
from kvroute.trace.writer import prompt_block_hashes

needs_build = pytest.mark.skipif(
    not hashing.active(), reason=f"chainhash.c: {_accel.status('trace')[1]}"
)

DTYPES = [np.uint32, np.int64, np.uint64, np.int32, np.uint16, np.uint8, np.int8]


@needs_build
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 120), max_size=300),
    st.integers(1, 40),
    st.sampled_from(DTYPES),
    st.integers(0, 2**64 - 1),
)
def test_c_matches_the_trace_writer(
    tokens: list[int], block_size: int, dtype: type, parent: int
) -> None:
    ids = np.array(tokens, dtype=dtype)
    expected = prompt_block_hashes(ids, block_size).tolist()
    assert hashing.block_hashes(ids, block_size) == expected
    assert hashing.numpy_block_hashes(ids, block_size) == expected
    full = len(tokens) // block_size
    assert hashing.block_hashes(ids, block_size, partial=False) == expected[:full]
    # From a parent: the same as the numpy chain from that seed.
    assert hashing.block_hashes(ids, block_size, parent) == hashing.numpy_block_hashes(
        ids, block_size, parent
    )


@needs_build
def test_c_matches_on_real_sized_prompts_and_large_ids() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 15, 16, 17, 4096, 10_001):
        ids = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        for block_size in (1, 16, 256):
            assert hashing.block_hashes(ids, block_size) == (
                prompt_block_hashes(ids, block_size).tolist()
            )
    negative = np.array([-1, -(2**40), 5], dtype=np.int64)  # wraps like astype(uint64)
    assert hashing.block_hashes(negative, 2) == prompt_block_hashes(negative, 2).tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**32 - 1), max_size=200),
    st.integers(1, 40),
    st.integers(0, 2**64 - 1),
)
def test_packed_bytes_hash_as_their_uint32_ids(
    tokens: list[int], block_size: int, parent: int
) -> None:
    """``bytes`` are token ids packed as native uint32 (how the gateway joins a prompt's
    pieces), in C and in the numpy fallback alike."""
    ids = np.array(tokens, dtype=np.uint32)
    expected = hashing.numpy_block_hashes(ids, block_size, parent)
    assert hashing.block_hashes(ids.tobytes(), block_size, parent) == expected
    assert hashing.numpy_block_hashes(ids.tobytes(), block_size, parent) == expected
    if hashing.active():
        assert hashing.native() is not None
        block_hashes = hashing.native()[0]  # type: ignore[index]
        assert (
            block_hashes(ids.tobytes(), block_size, parent, False)
            == expected[: len(tokens) // block_size]
        )


@needs_build
def test_c_refuses_packed_bytes_that_are_not_whole_ids() -> None:
    for call in (
        lambda: hashing.block_hashes(b"\x01\x00\x00\x00\x02", 2),
        lambda: hashing.common_prefix(b"\x01\x00\x00", b"\x01\x00\x00\x00"),
    ):
        with pytest.raises(ValueError, match="multiple of 4 bytes"):
            call()


@needs_build
def test_c_rejects_what_is_not_a_row_of_integers() -> None:
    with pytest.raises(TypeError, match="1-D buffer of integers"):
        hashing.block_hashes(np.zeros(4, dtype=np.float64), 2)
    with pytest.raises(TypeError, match="1-D buffer of integers"):
        hashing.block_hashes(np.zeros((2, 2), dtype=np.uint32), 2)
    with pytest.raises(ValueError, match="block_size"):
        hashing.block_hashes(np.zeros(4, dtype=np.uint32), 0)
    # A strided view is copied, not refused.
    ids = np.arange(40, dtype=np.uint32)
    assert hashing.block_hashes(ids[::2], 4) == prompt_block_hashes(ids[::2], 4).tolist()


def test_a_current_build_is_loaded() -> None:
    """When scripts/build-native has built the C modules, the process uses them."""
    usable, why = _accel.status("trace")
    if not usable:
        pytest.skip(f"C modules: {why}")
    assert hashing.active()
    assert all(_accel.optional(name) is not None for name in _accel.TRACE_C.module_names())


def test_the_numpy_fallback_chains_from_a_parent() -> None:
    ids = np.arange(37, dtype=np.uint32)
    whole = hashing.numpy_block_hashes(ids, 8)
    # The chain is a prefix function: hashing the rest from the 2nd block's hash
    # continues the same chain.
    rest = hashing.numpy_block_hashes(ids[16:], 8, whole[1])
    assert rest == whole[2:]
    assert hashing.numpy_block_hashes(ids[:0], 8) == []
    assert hashing.numpy_block_hashes(ids[:3], 8, partial=False) == []
    assert hashing.numpy_block_hashes(ids[:3], 8)[0] != DEFAULT_SEED


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
    st.sampled_from([np.uint32, np.int64, np.uint8]),
)
def test_common_prefix_counts_equal_leading_tokens(a: list[int], b: list[int], dtype: type) -> None:
    expected = 0
    while expected < min(len(a), len(b)) and a[expected] == b[expected]:
        expected += 1
    x, y = np.array(a, dtype=dtype), np.array(b, dtype=dtype)
    assert hashing.common_prefix(x, y) == expected
    assert hashing.common_prefix(y, x) == expected
    # Packed uint32 bytes, with each other or with a uint32 array.
    px, py = np.array(a, dtype=np.uint32), np.array(b, dtype=np.uint32)
    assert hashing.common_prefix(px.tobytes(), py.tobytes()) == expected
    assert hashing.common_prefix(px.tobytes(), py) == expected


@pytest.mark.parametrize("at", [0, 1, 255, 256, 257, 511, 1000, 2047, None])
def test_common_prefix_finds_a_difference_anywhere_in_a_long_prompt(at: int | None) -> None:
    """Across the C version's 1 KiB runs, 8-byte words and single bytes (uint32 ids:
    256 per run)."""
    a = np.arange(2048, dtype=np.uint32) * 7919
    b = a.copy()
    if at is not None:
        b[at] += 1
    expected = 2048 if at is None else at
    assert hashing.common_prefix(a, b) == expected
    assert hashing.common_prefix(b[:1500], a) == min(expected, 1500)
