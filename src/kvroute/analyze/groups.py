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
    """Counts reuse per block node; ``top`` turns counts into segments."""

    def __init__(self, block_size_tokens: int) -> None:
        self.block_size_tokens = block_size_tokens
        self._index: dict[int, int] = {}
        self._key: list[int] = []
        self._parent = array("q")
        self._count = array("q")
        self._extra = array("q")
        self._root_extra = 0
        self._root_extra_requests = 0
        self._total_saved = 0

    def add(self, block_hashes: list[int], matched_blocks: int, tokens_saved: int) -> None:
        """Record one request that reused its first ``matched_blocks`` blocks and
        ``tokens_saved`` tokens in all (whole blocks plus any token-level extension)."""
        self._total_saved += tokens_saved
        index = self._index
        parent = -1
        for key in block_hashes[:matched_blocks]:
            i = index.get(key)
            if i is None:
                i = len(self._key)
                index[key] = i
                self._key.append(key)
                self._parent.append(parent)
                self._count.append(1)
                self._extra.append(0)
            else:
                self._count[i] += 1
            parent = i
        extra = tokens_saved - matched_blocks * self.block_size_tokens
        if parent >= 0:
            self._extra[parent] += extra
        elif extra > 0:
            self._root_extra += extra
            self._root_extra_requests += 1

    def top(self, n: int) -> tuple[int, list[PrefixGroup]]:
        """The number of groups and the ``n`` that saved the most tokens."""
        bs = self.block_size_tokens
        count, parent, extra = self._count, self._parent, self._extra
        num = len(count)
        root = array("q", bytes(8 * num))
        depth = array("q", bytes(8 * num))
        saved: dict[int, int] = {}
        last: dict[int, int] = {}
        for i in range(num):
            p = parent[i]
            depth[i] = depth[p] + 1 if p >= 0 else 0
            r = root[p] if p >= 0 and count[p] == count[i] else i
            root[i] = r
            saved[r] = saved.get(r, 0) + count[i] * bs + extra[i]
            if depth[i] >= depth[last.get(r, r)]:
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
                    start_tokens=depth[r] * bs,
                    prefix_tokens=(depth[end] + 1) * bs,
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
