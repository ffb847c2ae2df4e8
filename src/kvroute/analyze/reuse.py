"""Reuse distance: how much KV memory an ideal LRU cache needs to catch the reuse.

For every block access that repeats an earlier one, the *stack distance* is the number
of distinct blocks touched since that block was last touched; an LRU cache of ``C``
blocks hits exactly when the distance is below ``C``. A request touches all blocks of
its prompt, a block's ancestors are touched whenever it is, so distances grow along a
prompt and the hit set stays a prefix, as in a real prefix cache.

Long traces are sampled spatially (SHARDS, Waldspurger et al., FAST'15): a block is
tracked when its hash falls under a threshold, so every access to a tracked block is
kept and distances measured among tracked blocks scale by ``1 / rate``. The rate halves
whenever the sample outgrows its budget; with a small trace it stays 1 (exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.analyze.bounds import policy_curves
from kvroute.types import BlockHashes

_FULL = 1 << 24


@dataclass(frozen=True, slots=True)
class ReuseResult:
    """Outcome of :class:`ReuseTracker`; capacities and distances in tokens."""

    sample_rate: float
    num_sampled_accesses: int
    capacity_tokens: list[int]
    hit_ratio: list[float]
    """Share of all prompt tokens an ideal LRU of each capacity would serve from cache."""
    infinite_hit_ratio: float
    distance_tokens_p50: float | None
    distance_tokens_p90: float | None
    reuse_time_s_p50: float | None
    reuse_time_s_p90: float | None
    reuse_time_s_hist_edges: list[float]
    reuse_time_s_hist_counts: list[int]
    fifo_hit_ratio: list[float]
    """The same capacities with FIFO eviction (bounds.py)."""
    optimal_hit_ratio: list[float]
    """The same capacities with optimal (Belady) eviction: no policy does better."""
    bounds_sample_rate: float
    """Share of blocks the FIFO and optimal replays kept (miniature simulation)."""
    pool: PoolHit | None = None
    """The same figures at the user's KV pool, when one was given."""


@dataclass(frozen=True, slots=True)
class PoolHit:
    """What an ideal cache of the user's KV pool would serve, by eviction policy."""

    capacity_tokens: int
    lru_hit_ratio: float
    fifo_hit_ratio: float
    optimal_hit_ratio: float
    sized_from: str | None = None
    """The model and GPUs the pool was sized from; ``None``: given in tokens."""


class ReuseTracker:
    """Collects the sampled block-access stream; ``finish`` computes distances."""

    def __init__(self, block_size_tokens: int, *, max_samples: int = 1_000_000) -> None:
        self.block_size_tokens = block_size_tokens
        self.max_samples = max_samples
        self._threshold = _FULL
        self._keys: list[npt.NDArray[np.uint64]] = []
        self._times: list[npt.NDArray[np.float64]] = []
        self._num_kept = 0
        self._total_tokens = 0

    def add_chunk(
        self, block_hashes: BlockHashes, arrival_s: npt.NDArray[np.float64], prompt_tokens: int
    ) -> None:
        """Record the full prompt blocks of a chunk of requests, in order (a partial
        last block is never cached, so it is not an access).

        Per block: its hash and its request's arrival time (NaN when unknown).
        ``prompt_tokens`` counts the chunk's whole prompts, partial tails included.
        """
        self._total_tokens += prompt_tokens
        if self._threshold != _FULL:
            keep = (block_hashes >> np.uint64(40)) < np.uint64(self._threshold)
            block_hashes, arrival_s = block_hashes[keep], arrival_s[keep]
        if block_hashes.shape[0] == 0:
            return
        self._keys.append(block_hashes)
        self._times.append(arrival_s)
        self._num_kept += block_hashes.shape[0]
        if self._num_kept > self.max_samples:
            self._downsample()

    def _downsample(self) -> None:
        keys = np.concatenate(self._keys)
        times = np.concatenate(self._times)
        while keys.shape[0] > self.max_samples and self._threshold > 1:
            self._threshold //= 2
            keep = (keys >> np.uint64(40)) < np.uint64(self._threshold)
            keys, times = keys[keep], times[keep]
        self._keys, self._times = [keys], [times]
        self._num_kept = keys.shape[0]

    def finish(
        self,
        capacity_grid_tokens: list[int],
        exact_infinite_hit: float | None = None,
        *,
        pool_tokens: int | None = None,
        pool_sized_from: str | None = None,
    ) -> ReuseResult:
        """Distances and the hit-ratio curve. With sampling, the curve's shape comes from
        the sample and its level from ``exact_infinite_hit`` (the block-level ideal hit,
        known exactly from the prefix index), which removes most of the sampling error.
        ``pool_tokens`` (the user's KV pool, sized from ``pool_sized_from`` when given)
        adds the figures at that capacity."""
        grid = list(capacity_grid_tokens)
        if pool_tokens is not None:
            capacity_grid_tokens = [*grid, pool_tokens]
        rate = self._threshold / _FULL
        keys_arr = np.concatenate(self._keys) if self._keys else np.empty(0, dtype=np.uint64)
        times = np.concatenate(self._times) if self._times else np.empty(0)
        n = keys_arr.shape[0]
        prev = _previous_access(keys_arr)
        dist = _stack_distances(prev)  # -1: first access
        reuse = dist >= 0
        dist_tokens = dist[reuse].astype(np.float64) / rate * self.block_size_tokens
        total = max(self._total_tokens, 1)
        # Every reuse serves one whole block: the k nearest reuses serve k blocks.
        sorted_d = np.sort(dist_tokens)
        served = np.arange(sorted_d.shape[0] + 1, dtype=np.float64)
        served *= self.block_size_tokens / rate
        if rate < 1.0 and exact_infinite_hit is not None and served[-1] > 0:
            share = served * (exact_infinite_hit / served[-1])
            share[-1] = exact_infinite_hit
        else:
            share = served / total  # divided, not scaled: the limit is Σ reused / Σ prompt exactly
        hit_ratio = [
            float(share[np.searchsorted(sorted_d, c, side="left")]) for c in capacity_grid_tokens
        ]
        fifo, optimal, bounds_rate = self._bounds(
            keys_arr, rate, capacity_grid_tokens, float(share[-1])
        )
        reuse_dt = _reuse_times(prev, times)
        finite_dt = reuse_dt[np.isfinite(reuse_dt)]
        edges, counts = _log_hist(finite_dt)
        pool = None
        if pool_tokens is not None:
            pool = PoolHit(pool_tokens, hit_ratio.pop(), fifo.pop(), optimal.pop(), pool_sized_from)
        return ReuseResult(
            sample_rate=rate,
            num_sampled_accesses=n,
            capacity_tokens=grid,
            hit_ratio=hit_ratio,
            infinite_hit_ratio=float(share[-1]),
            distance_tokens_p50=_pct(dist_tokens, 50),
            distance_tokens_p90=_pct(dist_tokens, 90),
            reuse_time_s_p50=_pct(finite_dt, 50),
            reuse_time_s_p90=_pct(finite_dt, 90),
            reuse_time_s_hist_edges=edges,
            reuse_time_s_hist_counts=counts,
            fifo_hit_ratio=fifo,
            optimal_hit_ratio=optimal,
            bounds_sample_rate=bounds_rate,
            pool=pool,
        )

    def _bounds(
        self,
        keys: npt.NDArray[np.uint64],
        rate: float,
        capacity_grid_tokens: list[int],
        infinite_hit: float,
    ) -> tuple[list[float], list[float], float]:
        """FIFO and optimal hit ratios on the grid, levelled like the LRU curve: every
        policy reaches ``infinite_hit`` once the whole working set fits."""
        blocks = [c // self.block_size_tokens for c in capacity_grid_tokens]
        curves = policy_curves(keys, rate, blocks, key_threshold=self._threshold)
        scale = infinite_hit / curves.num_reuses if curves.num_reuses else 0.0
        fifo = [h * scale for h in curves.fifo_hits]
        optimal = [h * scale for h in curves.optimal_hits]
        return fifo, optimal, curves.sample_rate


def _pct(values: npt.NDArray[np.float64], q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


_CLOCK_EDGES_S = (
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    43200.0,
    86400.0,
    172800.0,
    604800.0,
    2592000.0,
)
"""Reuse-time bin edges past a minute: 1, 2, 5, 10, 30 min, 1, 2, 6, 12 h, 1, 2, 7, 30 d."""


def _log_hist(values: npt.NDArray[np.float64]) -> tuple[list[float], list[int]]:
    pos = values[values > 0]
    if pos.size == 0:
        return [], []
    lo = np.floor(np.log10(pos.min()))
    hi = np.ceil(np.log10(pos.max())) + (1 if pos.min() == pos.max() else 0)
    # 1-2-5 in each decade: round edges a reader can name (not 10^(1/3) = 2.15...);
    # from a minute on, clock steps (1, 2, 5, 10, 30 min, 1 h...): 100 s reads as
    # "1 min 40 s".
    decades = np.arange(int(lo), int(hi))
    edges = np.append(np.outer(10.0**decades, (1.0, 2.0, 5.0)).ravel(), 10.0**hi)
    if edges[-1] > _CLOCK_EDGES_S[0]:
        top = float(pos.max())
        clock = [e for e in _CLOCK_EDGES_S if e < top]
        clock.append(next((e for e in _CLOCK_EDGES_S if e >= top), top))
        edges = np.append(edges[edges < _CLOCK_EDGES_S[0]], clock)
    counts, _ = np.histogram(pos, bins=edges)
    return [float(e) for e in edges], [int(c) for c in counts]


def _previous_access(arr: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Per access, the position of the previous access to the same key (-1 if none)."""
    n = arr.shape[0]
    order = np.argsort(arr, kind="stable")  # by key, then by position
    prev = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = arr[order[1:]] == arr[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
    return prev


def _reuse_times(
    prev: npt.NDArray[np.int64], times: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    has = prev >= 0
    return np.asarray(times[has] - times[prev[has]], dtype=np.float64)


def stack_distances(keys: list[int]) -> npt.NDArray[np.int64]:
    """Per access, distinct keys touched since the key's previous access (-1 if none)."""
    return _stack_distances(_previous_access(np.array(keys, dtype=np.uint64)))


def _stack_distances(prev: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Stack distances from previous-access positions, vectorised.

    For an access at ``t`` whose key was last touched at ``p``, the distinct keys in
    ``(p, t)`` are the positions ``q`` there whose own previous access is ``<= p``;
    since every ``q <= p`` trivially qualifies, ``D(t) = #{q < t : prev[q] <= p} - (p + 1)``.
    That dominance count is answered level by level: ``[0, t)`` splits into one aligned
    block of ``2**k`` positions per set bit ``k`` of ``t`` (block ``(t >> k) - 1``), and
    within each level the points are sorted by (block, prev) so one binary search per
    query counts its block. O(n log^2 n) in numpy instead of a Python Fenwick loop.
    """
    n = prev.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    queries = np.flatnonzero(prev >= 0)
    if queries.size == 0:
        return out
    q_p = prev[queries]
    counts = np.zeros(queries.size, dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    width = np.int64(n + 1)  # prev + 1 lies in [0, n]
    k = 0
    while (1 << k) <= n:
        sel = np.flatnonzero((queries >> k) & 1)
        if sel.size:
            keyed = np.sort((pos >> k) * width + (prev + 1))
            block = (queries[sel] >> k) - 1
            hi = np.searchsorted(keyed, block * width + q_p[sel] + 1, side="right")
            counts[sel] += hi - (block << k)
        k += 1
    out[queries] = counts - (q_p + 1)
    return out
