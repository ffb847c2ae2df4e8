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

    ``add`` only queues a request's matched blocks; they are folded into the node table a
    chunk at a time with numpy (a sorted key column and per-node columns), so hot shared
    prefixes and long traces cost no per-block Python work.
    """

    def __init__(self, block_size_tokens: int, *, flush_every: int = 1024) -> None:
        self.block_size_tokens = block_size_tokens
        self.flush_every = flush_every
        self._sorted_keys = np.empty(0, dtype=np.uint64)
        self._sorted_node = np.empty(0, dtype=np.int64)
        # Per node, in creation order.
        self._key = np.empty(0, dtype=np.uint64)
        self._parent_key = np.empty(0, dtype=np.uint64)
        self._depth = np.empty(0, dtype=np.int64)
        self._count = np.empty(0, dtype=np.int64)
        self._extra = np.empty(0, dtype=np.int64)
        self._root_extra = 0
        self._root_extra_requests = 0
        self._total_saved = 0
        self._pending: list[npt.NDArray[np.uint64]] = []
        self._pending_extra_keys: list[int] = []
        self._pending_extra: list[int] = []

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
                self._pending_extra_keys.append(int(block_hashes[matched_blocks - 1]))
                self._pending_extra.append(extra)
            if len(self._pending) >= self.flush_every:
                self._flush()
        elif extra > 0:
            self._root_extra += extra
            self._root_extra_requests += 1

    def _nodes_of(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        return self._sorted_node[np.searchsorted(self._sorted_keys, keys)]

    def _flush(self) -> None:
        if not self._pending:
            return
        lengths = np.array([a.shape[0] for a in self._pending], dtype=np.int64)
        keys = np.concatenate(self._pending)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        depth = np.arange(keys.shape[0], dtype=np.int64) - starts
        parents = np.concatenate([np.zeros(1, dtype=np.uint64), keys[:-1]])
        self._pending.clear()
        uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
        pos = np.searchsorted(self._sorted_keys, uniq)
        found = pos < self._sorted_keys.shape[0]
        found[found] = self._sorted_keys[pos[found]] == uniq[found]
        self._count[self._sorted_node[pos[found]]] += counts[found]
        new = ~found
        if new.any():
            base = self._key.shape[0]
            ids = np.arange(base, base + int(new.sum()), dtype=np.int64)
            self._key = np.concatenate([self._key, uniq[new]])
            self._parent_key = np.concatenate([self._parent_key, parents[first[new]]])
            self._depth = np.concatenate([self._depth, depth[first[new]]])
            self._count = np.concatenate([self._count, counts[new]])
            self._extra = np.concatenate([self._extra, np.zeros(ids.shape[0], dtype=np.int64)])
            self._sorted_keys = np.insert(self._sorted_keys, pos[new], uniq[new])
            self._sorted_node = np.insert(self._sorted_node, pos[new], ids)
        if self._pending_extra:
            nodes = self._nodes_of(np.array(self._pending_extra_keys, dtype=np.uint64))
            np.add.at(self._extra, nodes, np.array(self._pending_extra, dtype=np.int64))
            self._pending_extra_keys.clear()
            self._pending_extra.clear()

    def top(self, n: int) -> tuple[int, list[PrefixGroup]]:
        """The number of groups and the ``n`` that saved the most tokens."""
        self._flush()
        bs = self.block_size_tokens
        count, depth = self._count, self._depth
        num = count.shape[0]
        parent = np.full(num, -1, dtype=np.int64)
        has_parent = depth > 0
        parent[has_parent] = self._nodes_of(self._parent_key[has_parent])
        # A node continues its parent's segment when exactly the same requests reused both.
        root = np.arange(num, dtype=np.int64)
        by_depth = np.argsort(depth, kind="stable")
        level_starts = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2))
        for d in range(1, level_starts.shape[0] - 1):
            nodes = by_depth[level_starts[d] : level_starts[d + 1]]
            p = parent[nodes]
            same = count[p] == count[nodes]
            root[nodes[same]] = root[p[same]]
        saved = np.bincount(root, weights=count * bs + self._extra, minlength=num)
        roots = np.flatnonzero(np.bincount(root, minlength=num))
        order = np.lexsort((depth, root))  # last node of each root = its deepest
        by_root = root[order]
        is_last = np.append(by_root[1:] != by_root[:-1], True) if num else np.zeros(0, dtype=bool)
        last = np.empty(num, dtype=np.int64)
        last[by_root[is_last]] = order[is_last]
        total = max(self._total_saved, 1)
        best = roots[np.argsort(-saved[roots], kind="stable")[:n]]
        groups: list[PrefixGroup] = []
        for r in best.tolist():
            end = int(last[r])
            chain: list[int] = []
            i = end
            while i >= 0 and root[i] == r:
                chain.append(int(self._key[i]))
                i = int(parent[i])
            chain.reverse()
            groups.append(
                PrefixGroup(
                    num_requests=int(count[r]),
                    start_tokens=int(depth[r]) * bs,
                    prefix_tokens=(int(depth[end]) + 1) * bs,
                    tokens_saved=int(saved[r]),
                    share_of_reuse=float(saved[r]) / total,
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
        return int(roots.shape[0]) + (1 if self._root_extra > 0 else 0), groups
