"""Pairwise longest common prefix on a uniform sample of request pairs.

The "compare requests two by two" measure: how similar two random requests are at the
start. Requests are reservoir-sampled (uniform over the trace, bounded memory) and pairs
drawn uniformly from the reservoir; sizes are reported with the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvroute.stats import Distribution, describe
from kvroute.types import BlockHashes, TokenIds


@dataclass(frozen=True, slots=True)
class PairwiseResult:
    num_requests_sampled: int
    num_pairs: int
    lcp_tokens: Distribution
    lcp_share: Distribution
    """LCP divided by the shorter prompt's length."""
    share_pairs_sharing_a_prefix: float | None
    """Pairs whose LCP is at least one block."""


class PairSampler:
    """Reservoir of request prompts; ``rng`` makes it deterministic for a seed."""

    def __init__(
        self, rng: np.random.Generator, *, reservoir_size: int = 1000, num_pairs: int = 5_000
    ) -> None:
        self.rng = rng
        self.reservoir_size = reservoir_size
        self.num_pairs = num_pairs
        self._items: list[tuple[TokenIds | BlockHashes, int]] = []
        self._seen = 0
        # Reservoir sampling with geometric skips (Li's algorithm L): random numbers are
        # drawn only when an item is taken, not for every request.
        self._w = 1.0
        self._next = reservoir_size

    def add(self, units: TokenIds | BlockHashes, num_tokens: int) -> None:
        i = self._seen
        self._seen += 1
        k = self.reservoir_size
        if i < k:
            self._items.append((units, num_tokens))
            if i == k - 1:
                self._advance()
            return
        if i == self._next:
            self._items[int(self.rng.integers(0, k))] = (units, num_tokens)
            self._advance()

    def _advance(self) -> None:
        k = self.reservoir_size
        self._w *= math.exp(math.log(self.rng.random()) / k)
        skip = (
            math.floor(math.log(self.rng.random()) / math.log1p(-self._w)) if self._w < 1.0 else 0
        )
        self._next += skip + 1

    def finish(self, unit_tokens: int, block_size_tokens: int) -> PairwiseResult:
        k = len(self._items)
        if k < 2:
            empty = describe([])
            return PairwiseResult(k, 0, empty, empty, None)
        total_pairs = k * (k - 1) // 2
        if total_pairs <= self.num_pairs:
            ii, jj = np.triu_indices(k, 1)
        else:
            ii = self.rng.integers(0, k, size=self.num_pairs)
            jj = self.rng.integers(0, k - 1, size=self.num_pairs)
            jj = jj + (jj >= ii)
        lcps = np.empty(ii.shape[0], dtype=np.float64)
        shares = np.empty(ii.shape[0], dtype=np.float64)
        for n, (a, b) in enumerate(zip(ii.tolist(), jj.tolist(), strict=True)):
            ua, la = self._items[a]
            ub, lb = self._items[b]
            m = min(ua.shape[0], ub.shape[0])
            neq = np.flatnonzero(ua[:m] != ub[:m])
            lcp = min((int(neq[0]) if neq.size else m) * unit_tokens, la, lb)
            lcps[n] = lcp
            shares[n] = lcp / max(min(la, lb), 1)
        return PairwiseResult(
            num_requests_sampled=k,
            num_pairs=int(ii.shape[0]),
            lcp_tokens=describe(lcps, log_bins=True),
            lcp_share=describe(shares, bins=np.linspace(0, 1, 11)),
            share_pairs_sharing_a_prefix=float(np.mean(lcps >= block_size_tokens)),
        )
