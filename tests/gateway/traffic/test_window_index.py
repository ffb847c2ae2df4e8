"""The traffic window's block index: for chained block hashes, the matched prefix is
the longest one a request numbered ``floor`` or later had (checked against a brute
force over the history), and a sweep keeps exactly the blocks of those requests."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvroute.gateway.traffic.window_index import WindowIndex


def chained(blocks: list[int]) -> list[int]:
    """Chained 'hashes' of a prompt whose blocks have these contents."""
    out, h = [], 0
    for b in blocks:
        h = hash((h, b))
        out.append(h)
    return out


def brute_force(history: list[list[int]], floor: int, hashes: list[int]) -> int:
    best = 0
    for earlier in history[floor:]:
        n = 0
        while n < min(len(earlier), len(hashes)) and earlier[n] == hashes[n]:
            n += 1
        best = max(best, n)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_with_splits_and_sweeps(seed: int) -> None:
    rng = random.Random(seed)
    index = WindowIndex()
    contents: list[list[int]] = []
    history: list[list[int]] = []
    floor = 0
    system = [rng.randrange(1000) for _ in range(40)]
    for seq in range(600):
        shape = rng.random()
        if shape < 0.4:  # a long shared start, cut anywhere, then a short tail
            blocks = system[: rng.randrange(1, 41)] + [rng.randrange(3)] * rng.randrange(3)
        elif shape < 0.8 and contents:  # an earlier prompt, cut, plus a few new blocks
            earlier = rng.choice(contents)
            blocks = earlier[: rng.randrange(len(earlier) + 1)]
            blocks += [rng.randrange(4) for _ in range(rng.randrange(4))]
        else:
            blocks = [rng.randrange(3) for _ in range(rng.randrange(8))]
        hashes = chained(blocks)
        floor = max(floor, seq - rng.randrange(5, 60))
        assert index.observe(hashes, seq, floor) == brute_force(history, floor, hashes)
        contents.append(blocks)
        history.append(hashes)
        if rng.random() < 0.05:
            index.sweep(floor)  # later floors are never lower
            live = {h for prompt in history[floor:] for h in prompt}
            assert index.num_blocks == len(live)
            assert index.num_runs <= 3 * (seq + 1 - floor)


def test_a_shared_start_is_stored_once() -> None:
    index = WindowIndex()
    system = chained(list(range(270)))
    for seq in range(100):
        tail = chained([*range(270), 1000 + seq])[270:]
        assert index.observe(system + tail, seq, 0) == (270 if seq else 0)
    assert index.num_blocks == 270 + 100


def test_a_sweep_joins_runs_cut_by_prompts_gone_from_the_window() -> None:
    """Prompts that stopped inside a long run cut it; once they left the window and the
    latest prompts ran through the whole of it, a sweep joins the pieces again."""
    index = WindowIndex()
    system = chained(list(range(100)))
    for seq in range(20):  # each stops at another point: 21 runs along the path
        index.observe(system[: 5 * (seq + 1)], seq, 0)
    assert index.num_runs == 20
    for seq in range(20, 25):
        assert index.observe(system, seq, 20) == (0 if seq == 20 else 100)
    index.sweep(20)
    assert (index.num_runs, index.num_blocks) == (1, 100)
    assert index.observe(system[:37], 25, 21) == 37  # split again where a prompt ends
    assert index.num_runs == 2


def test_an_array_of_hashes_is_read_as_its_ints() -> None:
    """The cache views' uint64 arrays (values above 2**63 included) match the same
    hashes given as Python ints."""
    rng = random.Random(1)
    prompts = [[rng.getrandbits(64) for _ in range(5)] for _ in range(3)]
    prompts.append([*prompts[0][:3], rng.getrandbits(64)])
    as_lists, as_arrays = WindowIndex(), WindowIndex()
    for seq, hashes in enumerate(prompts * 2):
        array = np.array(hashes, dtype=np.uint64)
        assert as_arrays.observe(array, seq, 0) == as_lists.observe(hashes, seq, 0)
    assert as_arrays.observe(np.array(prompts[3], dtype=np.uint64), 9, 0) == 4
    assert as_arrays.num_blocks == as_lists.num_blocks == 16
