"""The vLLM model's step-by-step memory (``pin_steps`` / ``grow`` / ``preempt``), which the
latency replay uses, on block counts small enough to check by hand."""

from __future__ import annotations

import numpy as np

from kvroute.cache.base import AdmitStatus, CacheGeometry, CacheSeq
from kvroute.cache.models.vllm import VllmConfig, VllmPrefixCache

U = 4  # tokens per block


def _seq(keys: list[int], num_tokens: int) -> CacheSeq:
    return CacheSeq(np.array(keys, dtype=np.uint64), num_tokens, -(-num_tokens // U), U)


def _model(num_blocks: int) -> VllmPrefixCache:
    # capacity // block - 1 blocks: one is vLLM's null block
    return VllmPrefixCache(VllmConfig(block_size_tokens=U), CacheGeometry((num_blocks + 1) * U))


def _pinned_blocks(m: VllmPrefixCache) -> int:
    return m.usage().pinned_tokens // U


def test_a_start_takes_the_first_chunk_only_and_decode_grows_block_by_block() -> None:
    m = _model(10)
    prompt = _seq([1, 2, 3], 12)
    final = _seq([1, 2, 3, 4, 5], 20)
    assert m.pin_steps(0, prompt, final, max_new_tokens=6).status is AdmitStatus.ADMITTED
    assert _pinned_blocks(m) == 2  # 6 tokens: blocks 0-1, not the whole prompt
    assert m.room_tokens(0) == 8
    assert m.grow(0, 12)  # the rest of the prompt
    assert _pinned_blocks(m) == 3
    assert m.grow(0, 13)  # the first decoded token opens block 3
    assert _pinned_blocks(m) == 4
    assert m.grow(0, 16)  # still block 3
    assert _pinned_blocks(m) == 4
    m.check_invariants()
    m.unpin(0, final)
    assert m.usage().cached_tokens == 5 * U - U  # 4 full blocks cached, the partial one not
    m.check_invariants()


def test_grow_refuses_when_short_and_changes_nothing() -> None:
    m = _model(4)
    a, fa = _seq([1, 2], 8), _seq([1, 2, 3, 4], 16)
    b, fb = _seq([7, 8], 8), _seq([7, 8], 8)
    assert m.pin_steps(0, a, fa, 8).status is AdmitStatus.ADMITTED
    assert m.pin_steps(1, b, fb, 8).status is AdmitStatus.ADMITTED
    assert m.free_blocks() == 0
    before = m.usage()
    assert not m.grow(0, 9)  # needs a 3rd block: none free
    assert m.usage() == before
    assert m.room_tokens(0) == 8
    m.check_invariants()


def test_admission_needs_the_hit_and_its_chunk_to_fit() -> None:
    m = _model(3)
    assert m.pin_steps(0, _seq([1, 2], 8), _seq([1, 2, 3], 12), 8).status is AdmitStatus.ADMITTED
    # 1 block free: a 2-block first chunk does not fit, a 1-block one does
    assert m.pin_steps(1, _seq([5, 6], 8), _seq([5, 6], 8), 8).status is AdmitStatus.NO_ROOM
    assert m.pin_steps(1, _seq([5, 6], 8), _seq([5, 6], 8), 4).status is AdmitStatus.ADMITTED
    # a final sequence larger than the pool can never run
    big = _seq(list(range(20, 25)), 20)
    assert m.pin_steps(2, _seq([9], 4), big, 4).status is AdmitStatus.TOO_LARGE


def test_preempt_frees_the_blocks_and_keeps_the_full_ones_cached_for_the_return() -> None:
    m = _model(4)
    prompt = _seq([1, 2], 8)
    final = _seq([1, 2, 3, 4], 16)
    m.pin_steps(0, prompt, final, 8)
    assert m.grow(0, 11)  # prompt + 3 generated tokens' slots (block 2 partly full)
    m.preempt(0, num_computed=11)
    assert _pinned_blocks(m) == 0
    assert m.free_blocks() == 4
    m.check_invariants()
    # the return: prompt plus the generated tokens so far; blocks 0-1 hit, block 2 was
    # partial (not cached) and is computed again
    again = CacheSeq(final.keys[:2], 11, 3, U)
    adm = m.pin_steps(0, again, final, 100)
    assert adm.status is AdmitStatus.ADMITTED
    assert adm.cached_tokens == 8
    m.check_invariants()


def test_preempt_caches_a_block_filled_since_the_last_allocation() -> None:
    m = _model(4)
    final = _seq([1, 2, 3, 4], 16)
    m.pin_steps(0, _seq([1, 2], 8), final, 8)
    assert m.grow(0, 9)  # block 2 taken for token 8
    # tokens 9-11 fill block 2 without a new allocation; at 12 computed it is full
    m.preempt(0, num_computed=12)
    again = CacheSeq(final.keys[:3], 13, 4, U)
    assert m.pin_steps(0, again, final, 100).cached_tokens == 12
