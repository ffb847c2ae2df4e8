"""FIFO and optimal (Belady) eviction next to LRU: is a low hit a policy problem or a
memory problem?

Both replay the block-access stream of :mod:`kvroute.analyze.reuse` (each request
touches its full prompt blocks in order) through a cache of ``C`` blocks and count the
accesses that hit, per block as the LRU curve does. *Optimal* is Belady's MIN with
demand insertion: a miss always enters the cache (the engine has just computed that KV),
and a full cache evicts the block whose next use lies furthest ahead. Among the blocks of
one request the deeper one is used later, so it goes first and hits stay prefixes. No
online policy does better at that capacity; LRU's distance from it is what a smarter
policy could win, its distance from the infinite cache what more memory would.

Long streams are simulated in miniature (Waldspurger et al., ATC'17): the stream is
sampled by block hash at ``rate`` and the cache scaled to ``C · rate`` blocks, which
preserves every policy's hit ratio up to sampling noise. Pure and single-threaded.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_ACCESSES = 100_000
"""Accesses simulated per policy and capacity: above, the stream is sampled further."""


@dataclass(frozen=True, slots=True)
class PolicyCurves:
    """Blocks served from cache per capacity, for each policy, on the sampled stream."""

    sample_rate: float
    """Share of blocks kept (relative to the full stream)."""
    num_reuses: int
    """Accesses of the sample that repeat an earlier one: the infinite cache's hits."""
    fifo_hits: list[int]
    optimal_hits: list[int]


def dense_codes(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Each key as a small integer (0 .. distinct - 1), equal keys equal codes."""
    _, codes = np.unique(keys, return_inverse=True)
    return codes.astype(np.int64)


def next_uses(codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per access, the position of the next access to the same key (``len`` if none)."""
    n = codes.shape[0]
    order = np.argsort(codes, kind="stable")
    nxt = np.full(n, n, dtype=np.int64)
    if n > 1:
        same = codes[order[1:]] == codes[order[:-1]]
        nxt[order[:-1][same]] = order[1:][same]
    return nxt


def fifo_hits(codes: npt.NDArray[np.int64], capacity_blocks: int) -> int:
    """Hits of a FIFO cache of ``capacity_blocks``: a hit does not refresh a block."""
    if capacity_blocks < 1:
        return 0
    cached = bytearray(int(codes.max()) + 1 if codes.size else 0)
    queue: deque[int] = deque()
    hits = 0
    for k in codes.tolist():
        if cached[k]:
            hits += 1
            continue
        if len(queue) >= capacity_blocks:
            cached[queue.popleft()] = 0
        queue.append(k)
        cached[k] = 1
    return hits


def optimal_hits(
    codes: npt.NDArray[np.int64], nxt: npt.NDArray[np.int64], capacity_blocks: int
) -> int:
    """Hits of Belady's MIN (demand insertion) with ``capacity_blocks``."""
    if capacity_blocks < 1:
        return 0
    n = codes.shape[0]
    # cached key -> its next use; the heap holds (-next use, key), stale entries skipped
    next_of = [-1] * (int(codes.max()) + 1 if codes.size else 0)
    heap: list[tuple[int, int]] = []
    size = hits = 0
    for k, nu in zip(codes.tolist(), nxt.tolist(), strict=True):
        if next_of[k] >= 0:
            hits += 1
        else:
            if size >= capacity_blocks:
                while True:
                    neg, victim = heapq.heappop(heap)
                    if next_of[victim] == -neg:
                        break
                next_of[victim] = -1
                size -= 1
            size += 1
        # a block never used again sorts furthest ahead of all
        next_of[k] = nu if nu < n else n
        heapq.heappush(heap, (-next_of[k], k))
    return hits


def policy_curves(
    keys: npt.NDArray[np.uint64],
    sample_rate: float,
    capacity_blocks: list[int],
    *,
    key_threshold: int,
    max_accesses: int = MAX_ACCESSES,
) -> PolicyCurves:
    """FIFO and optimal hits at each capacity (in full-stream blocks) on ``keys``, a
    stream already sampled at ``sample_rate`` by ``(key >> 40) < key_threshold``; it is
    sampled further, the same way, down to ``max_accesses``."""
    threshold = key_threshold
    while keys.shape[0] > max_accesses and threshold > 1:
        threshold //= 2
        keys = keys[(keys >> np.uint64(40)) < np.uint64(threshold)]
    rate = sample_rate * threshold / key_threshold
    codes = dense_codes(keys)
    distinct = int(codes.max()) + 1 if codes.size else 0
    reuses = int(codes.shape[0]) - distinct
    nxt = next_uses(codes)
    fifo: list[int] = []
    opt: list[int] = []
    for cap in capacity_blocks:
        scaled = max(1, round(cap * rate))
        if scaled >= distinct:  # everything fits: only first accesses miss
            fifo.append(reuses)
            opt.append(reuses)
            continue
        fifo.append(fifo_hits(codes, scaled))
        opt.append(optimal_hits(codes, nxt, scaled))
    return PolicyCurves(rate, reuses, fifo, opt)
