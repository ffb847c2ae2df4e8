"""The radix tree over chained keys: walk, split, insert, locks, policy-ordered eviction."""

from __future__ import annotations

import numpy as np
import pytest

from cache.cache_traces import pair
from kvroute.cache.models.radix import EvictionPolicy, RadixTree


def keys(tokens: list[int]) -> np.ndarray:
    return pair(1, tokens).prompt.keys


def test_walk_insert_and_split() -> None:
    t = RadixTree()
    _node, present = t.insert(t.root, keys([1, 2, 3, 4]))
    assert present == 0 and t.evictable_units == 4
    assert t.walk(keys([1, 2, 9])).matched == 2
    _, present = t.insert(t.root, keys([1, 2, 9]))
    assert present == 2 and t.evictable_units == 5
    assert len(t.root.children) == 1  # [1 2] -> {[3 4], [9]}
    upper = next(iter(t.root.children.values()))
    assert upper.size == 2 and len(upper.children) == 2
    t.check_invariants()


def test_locked_paths_are_not_evicted_and_parents_cascade() -> None:
    t = RadixTree()
    t.insert(t.root, keys([1, 2, 3]))
    leaf, _ = t.insert(t.root, keys([1, 2, 4, 5]))
    t.inc_lock(leaf)
    assert t.protected_units == 4 and t.evictable_units == 1
    assert t.evict(10) == (1, 1)  # only the unlocked [3] goes
    t.dec_lock(leaf)
    assert t.evict(10) == (4, 2)  # [4 5], then its parent [1 2] once it is a leaf
    assert t.total_units == 0
    t.check_invariants()


@pytest.mark.parametrize(
    ("policy", "first_gone"),
    [
        (EvictionPolicy.LRU, [1]),
        (EvictionPolicy.MRU, [2]),
        (EvictionPolicy.FIFO, [1]),
        (EvictionPolicy.FILO, [3]),
    ],
)
def test_eviction_order(policy: EvictionPolicy, first_gone: list[int]) -> None:
    t = RadixTree(policy)
    t.insert(t.root, keys([1]))
    t.insert(t.root, keys([2]))
    t.insert(t.root, keys([3]))
    t.lock(t.walk(keys([2])), 1)  # touch [2] (most recent access); unlock again
    t.dec_lock(next(n for n in t.root.children.values() if n.key[0] == keys([2])[0]))
    t.evict(1)
    remaining = {int(k) for k in t.root.children}
    gone = [x for x in (1, 2, 3) if int(keys([x])[0]) not in remaining]
    assert gone == first_gone
