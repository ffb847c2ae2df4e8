"""Which blocks of a prompt some request in the traffic window also had, in time that
grows with the prompt's branch points, not its length.

The window (:mod:`kvroute.gateway.traffic.shape`) needs, for a new prompt's chained
block hashes, the longest prefix that a request still in the window also had. Keeping
the newest request number of every block costs one dict write per block per request:
~17 µs for a 4.4k-token prompt (275 blocks), however much of it is a system prompt every
request repeats. Here the prompts seen form a tree of *segments*, runs of blocks that
every request passing through them holds whole (a segment is split where a prompt
leaves it or ends inside it), and each segment keeps the newest request that went
through it. A prompt that repeats a 270-block system prompt and adds five blocks walks
and stamps two segments.

Block hashes are chained (a block's hash covers everything before it), so equal last
hashes mean an equal run, and the blocks a prompt shares with a segment are found by a
binary search. Because every request through a segment went through its parent, a
parent's newest request is never older than its child's: the prefix in the window ends
at the first segment on the prompt's path whose newest request left the window.
Single-threaded, like the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

Hashes: TypeAlias = Sequence[int] | npt.NDArray[np.uint64]
"""A prompt's chained block hashes: Python ints, or the cache views' uint64 array as it
is (only the blocks stored as a new run are converted)."""


class _Segment:
    """A run of blocks, the newest request that held it, the segments after it."""

    __slots__ = ("children", "hashes", "newest")

    def __init__(self, hashes: list[int], newest: int) -> None:
        self.hashes = hashes
        self.newest = newest
        self.children: dict[int, _Segment] = {}
        """Keyed by the first block hash of each child segment."""

    def split(self, at: int) -> None:
        """Keep the first ``at`` blocks here; the rest becomes the only child (with this
        segment's children and newest request: everything that went through the rest
        went through the whole)."""
        rest = _Segment(self.hashes[at:], self.newest)
        rest.children = self.children
        self.hashes = self.hashes[:at]
        self.children = {rest.hashes[0]: rest}


class WindowIndex:
    """The block runs of the requests seen, each with the newest request that held it."""

    def __init__(self) -> None:
        self._root = _Segment([], -1)
        self.num_blocks = 0
        """Blocks stored (each distinct run once), expired ones until :meth:`sweep`."""
        self.num_runs = 0
        """Runs stored: a request adds at most two (a split and its new tail); after a
        sweep, at most three per request left (a run with one child is kept only
        where its newest request ended)."""

    def observe(self, hashes: Hashes, seq: int, floor: int) -> int:
        """Add request ``seq`` with these chained block hashes; return how many of its
        leading blocks a request numbered ``floor`` or later already had."""
        node = self._root
        n = len(hashes)
        pos = 0
        matched = 0
        while pos < n:
            child = node.children.get(int(hashes[pos]))
            if child is None:
                break
            run = child.hashes
            size = len(run)
            end = min(size, n - pos)
            if int(hashes[pos + end - 1]) != run[end - 1]:
                end = _shared(hashes, pos, run, end)  # the prompt leaves this run
            if end < size:
                child.split(end)
                self.num_runs += 1
            if child.newest >= floor:  # then so are all the runs before it
                matched = pos + end
            child.newest = seq
            pos += end
            node = child
        if pos < n:
            tail = hashes[pos:]
            new = tail.tolist() if isinstance(tail, np.ndarray) else list(tail)
            node.children[new[0]] = _Segment(new, seq)
            self.num_blocks += n - pos
            self.num_runs += 1
        return matched

    def sweep(self, floor: int) -> None:
        """Forget the runs no request numbered ``floor`` or later went through, and join
        a run with its only child when the same request was the newest through both
        (each block's newest request is unchanged), so that prompts which ended or
        left inside a run long ago do not leave it cut in pieces."""
        stack = [self._root]
        kept = runs = 0
        while stack:
            node = stack.pop()
            while True:
                stale = [k for k, c in node.children.items() if c.newest < floor]
                for k in stale:
                    del node.children[k]
                if node is self._root or len(node.children) != 1:
                    break
                (only,) = node.children.values()
                if only.newest != node.newest:
                    break
                node.hashes = node.hashes + only.hashes
                node.children = only.children
            if node is not self._root:
                kept += len(node.hashes)
                runs += 1
            stack.extend(node.children.values())
        self.num_blocks = kept
        self.num_runs = runs


def _shared(hashes: Hashes, pos: int, run: list[int], end: int) -> int:
    """How many leading blocks of ``run`` equal ``hashes[pos:]`` (at least one: the
    first is the child's key; fewer than ``end``: its last differs). Chained hashes:
    equal up to some block, different after."""
    lo, hi = 1, end - 1  # answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(hashes[pos + mid - 1]) == run[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo
