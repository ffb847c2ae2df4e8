"""Prompt and final sequences: the analyze keys, unique unknown outputs, units."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.cache.base import CacheSeq, common_prefix_len
from kvroute.cache.replay.seq import SeqBuilder, final_tokens, trace_block_size
from kvroute.errors import InputError
from kvroute.trace.hashing import chain_hashes, rechain_ids
from kvroute.trace.records import BlockPrompt, Request, TextPrompt, TokenPrompt


def test_token_keys_are_analyze_chain_hashes_and_prefix_the_final() -> None:
    toks = np.arange(37, dtype=np.uint32)
    req = Request(prompt=TokenPrompt(toks), output_len=10)
    p = SeqBuilder(16, block_size_tokens=None).build([req], [0], [10])[0]
    assert np.array_equal(p.prompt.keys, chain_hashes(toks, 16))
    assert p.prompt.num_units == 3 and p.prompt.num_keys == 2
    assert p.final.num_tokens == final_tokens(37, 10) == 46
    assert np.array_equal(p.final.keys[:2], p.prompt.keys) and p.final.num_keys == 2


def test_unknown_outputs_are_unique_known_ones_are_hashed() -> None:
    toks = np.arange(8, dtype=np.uint32)
    answer = np.arange(100, 110, dtype=np.uint32)
    a = Request(prompt=TokenPrompt(toks), output_len=10)
    b = Request(prompt=TokenPrompt(toks.copy()), output_len=10, output_token_ids=answer)
    pa, pb, pc = SeqBuilder(1, block_size_tokens=None).build([a, a, b], [0, 1, 2], [10, 10, 10])
    assert common_prefix_len(pa.final.keys, pb.final.keys) == 8  # outputs never match
    expected = chain_hashes(np.concatenate([toks, answer[:9]]), 1)
    assert np.array_equal(pc.final.keys, expected)


def test_hash_only_keys_rechain_ids_and_keep_the_partial_block() -> None:
    ids = np.array([5, 6, 7], dtype=np.uint64)
    req = Request(prompt=BlockPrompt(ids, 8, 20), output_len=3)
    p = SeqBuilder(8, block_size_tokens=8).build([req], [4], [3])[0]
    assert np.array_equal(p.prompt.keys, rechain_ids(ids, np.array([0])))
    assert p.prompt.num_units == 3 and p.prompt.tokens_in(3) == 20
    assert p.final.num_units == 4 and p.final.num_tokens == 22
    assert p.prompt.units_for_total(22) == 4


def test_cache_outputs_off_leaves_outputs_unkeyed() -> None:
    req = Request(prompt=TokenPrompt(np.arange(32, dtype=np.uint32)), output_len=40)
    p = SeqBuilder(16, block_size_tokens=None, cache_outputs=False).build([req], [0], [40])[0]
    assert p.final.num_keys == 2 and p.final.num_units == 5


def test_errors() -> None:
    with pytest.raises(InputError, match="untokenized text"):
        trace_block_size(Request(prompt=TextPrompt("hi")))
    mixed = [
        Request(prompt=TokenPrompt(np.arange(3, dtype=np.uint32))),
        Request(prompt=BlockPrompt(np.arange(1, dtype=np.uint64), 8, 8)),
    ]
    with pytest.raises(InputError, match="cannot mix"):
        SeqBuilder(1, block_size_tokens=None).build(mixed, [0, 1], [0, 0])
    with pytest.raises(ValueError):
        CacheSeq(np.arange(3, dtype=np.uint64), 10, 2, 4)
