"""Shared-prefix groups: the prefixes that save the most tokens.

Every reused block is a node of a trie of prefixes; ``count`` is how many later
requests reused it. Along any request's path counts never grow with depth, and a child
has its parent's count exactly when every request that reused the parent also reused
the child. Chains of equal counts are therefore one *segment* of shared text (a system
prompt, a tool schema, a session's history so far) reused by the same requests; a
group is such a segment. Each request's reuse is split over the segments on its path,
so group savings add up to the trace's total reuse and a user sees "this system prompt
plus tool schema is 70 % of your reuse".

Token-level reuse beyond the last whole block is credited to the group of that block
(or to a pseudo-group of sub-block prefixes when no whole block matched).
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    num_requests: int
    """Requests that reused this segment (the one that first wrote it not counted)."""
    start_tokens: int
    """Where the segment starts in the prompt (0 for a leading prefix such as a system prompt)."""
    prefix_tokens: int
    """Where it ends: the whole shared prefix through this segment, block aligned."""
    tokens_saved: int
    share_of_reuse: float
    head_block_hashes: list[int]
    tail_block_hashes: list[int]
    """Blocks at the start and end of the segment, for a text preview."""
    sub_block: bool = False
    """True for the pseudo-group of reuse shorter than one block (no block of its own)."""


class GroupTracker:
    """Counts reuse per block node; ``top`` turns counts into segments.

    ``add`` only queues a request's matched blocks; they are folded into the per-node
    counts a chunk at a time (one dictionary operation per distinct block per chunk,
    not per request), which keeps hot shared prefixes cheap.
    """

    def __init__(self, block_size_tokens: int, *, flush_every: int = 1024) -> None:
        self.block_size_tokens = block_size_tokens
        self.flush_every = flush_every
        self._index: dict[int, int] = {}
        self._key: list[int] = []
        self._parent_key: list[int] = []
        self._depth = array("q")
        self._count = array("q")
        self._extra = array("q")
        self._root_extra = 0
        self._root_extra_requests = 0
        self._total_saved = 0
        self._pending: list[npt.NDArray[np.uint64]] = []
        self._pending_extra: list[tuple[int, int]] = []

    def add(
        self, block_hashes: npt.NDArray[np.uint64], matched_blocks: int, tokens_saved: int
    ) -> None:
        """Record one request that reused its first ``matched_blocks`` blocks and
        ``tokens_saved`` tokens in all (whole blocks plus any token-level extension)."""
        self._total_saved += tokens_saved
        extra = tokens_saved - matched_blocks * self.block_size_tokens
        if matched_blocks:
            self._pending.append(block_hashes[:matched_blocks])
            if extra:
                self._pending_extra.append((int(block_hashes[matched_blocks - 1]), extra))
            if len(self._pending) >= self.flush_every:
                self._flush()
        elif extra > 0:
            self._root_extra += extra
            self._root_extra_requests += 1

    def _flush(self) -> None:
        if not self._pending:
            return
        lengths = np.array([a.shape[0] for a in self._pending], dtype=np.int64)
        keys = np.concatenate(self._pending)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        depth = np.arange(keys.shape[0], dtype=np.int64) - starts
        parents = np.concatenate([[np.uint64(0)], keys[:-1]])
        self._pending.clear()
        uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
        index, count = self._index, self._count
        for key, f, c in zip(uniq.tolist(), first.tolist(), counts.tolist(), strict=True):
            i = index.get(key)
            if i is None:
                index[key] = len(self._key)
                self._key.append(key)
                self._parent_key.append(int(parents[f]))
                self._depth.append(int(depth[f]))
                count.append(c)
                self._extra.append(0)
            else:
                count[i] += c
        for key, extra in self._pending_extra:
            self._extra[index[key]] += extra
        self._pending_extra.clear()

    def top(self, n: int) -> tuple[int, list[PrefixGroup]]:
        """The number of groups and the ``n`` that saved the most tokens."""
        self._flush()
        bs = self.block_size_tokens
        count, extra, depth_of = self._count, self._extra, self._depth
        num = len(count)
        # Parents before children: visit nodes by depth.
        order = (
            np.argsort(np.frombuffer(depth_of, dtype=np.int64), kind="stable").tolist()
            if num
            else []
        )
        parent = array("q", [-1]) * num
        root = array("q", bytes(8 * num))
        saved: dict[int, int] = {}
        last: dict[int, int] = {}
        for i in order:
            p = self._index[self._parent_key[i]] if depth_of[i] > 0 else -1
            parent[i] = p
            r = root[p] if p >= 0 and count[p] == count[i] else i
            root[i] = r
            saved[r] = saved.get(r, 0) + count[i] * bs + extra[i]
            if depth_of[i] >= depth_of[last.get(r, r)]:
                last[r] = i
        total = max(self._total_saved, 1)
        groups: list[PrefixGroup] = []
        for r, s in heapq.nlargest(n, saved.items(), key=lambda kv: kv[1]):
            end = last[r]
            chain = []
            i = end
            while i >= 0 and root[i] == r:
                chain.append(self._key[i])
                i = parent[i]
            chain.reverse()
            groups.append(
                PrefixGroup(
                    num_requests=count[r],
                    start_tokens=depth_of[r] * bs,
                    prefix_tokens=(depth_of[end] + 1) * bs,
                    tokens_saved=s,
                    share_of_reuse=s / total,
                    head_block_hashes=chain[:4],
                    tail_block_hashes=chain[-2:] if len(chain) > 4 else [],
                )
            )
        if self._root_extra > 0:
            sub = PrefixGroup(
                self._root_extra_requests,
                0,
                0,
                self._root_extra,
                self._root_extra / total,
                [],
                [],
                True,
            )
            groups.append(sub)
            groups.sort(key=lambda g: -g.tokens_saved)
            groups = groups[:n]
        return len(saved) + (1 if self._root_extra > 0 else 0), groups
