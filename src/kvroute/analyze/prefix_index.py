"""The set of every prefix seen so far in a trace, answering "how long a prefix of this
prompt did an earlier request already have?" exactly, at token level.

Memory grows with *unique blocks*, not with total tokens: a prefix is stored as the
chained hashes of its full blocks (:mod:`kvroute.trace.hashing`) and, for token
traces, each block's tokens under its parent. Matching is a binary search over the
prompt's block hashes (prefix sets are closed under taking prefixes, so "seen" is
monotone along a prompt), then a token-level extension into the next block against
the sorted token strings that followed the matched prefix in earlier requests: the
longest common prefix with any string in a sorted list is reached at one of the two
neighbours of the query's insertion point.

Positions, for a prompt of ``L`` tokens in blocks of ``B`` (``nb = L // B`` full)::

    tokens   [0 ........ m*B) [m*B ... m*B+ext) [...................... L)
    blocks    0 .. m-1 seen    block m: partial   not seen earlier
    result    matched_blocks = m, matched_tokens = m*B + ext   (ext < B unless m == nb)
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvroute.types import BlockHashes, TokenIds


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """How much of one prompt an earlier request already had."""

    matched_blocks: int
    matched_tokens: int
    deepest_block_hash: int | None
    """Hash of the last matched full block (``None`` when no full block matched)."""


def _common_prefix_len(a: bytes, b: bytes) -> int:
    """Length of the common prefix of two byte strings (XOR of their big-endian integers)."""
    n = min(len(a), len(b))
    diff = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return n - (diff.bit_length() + 7) // 8


class PrefixIndex:
    """Prefixes of all prompts inserted so far, for one block size.

    ``match_and_insert`` both answers the query and records the prompt; it is the only
    mutating method. Token-level extension is available when prompts are given with
    their tokens (``keep_tokens=True``); hash-only traces match whole blocks.
    """

    def __init__(self, block_size_tokens: int, *, keep_tokens: bool) -> None:
        self.block_size_tokens = block_size_tokens
        self.keep_tokens = keep_tokens
        self._seen: set[int] = set()
        # parent block hash (None = empty prefix) -> sorted big-endian token strings that
        # followed it: each full child block once, plus partial prompt tails.
        self._children: dict[int | None, list[bytes]] = {}
        # block hash -> its tokens (the same bytes objects as in _children), for previews
        self._tokens_of: dict[int, bytes] = {}

    @property
    def num_unique_blocks(self) -> int:
        return len(self._seen)

    def block_token_ids(self, block_hashes: list[int]) -> list[int] | None:
        """Tokens of the given blocks, concatenated; None when any is unknown (hash-only)."""
        parts = [self._tokens_of.get(h) for h in block_hashes]
        if any(p is None for p in parts):
            return None
        joined = b"".join(p for p in parts if p is not None)
        ids: list[int] = np.frombuffer(joined, dtype=">u4").astype(np.uint32).tolist()
        return ids

    def _num_seen(self, keys: list[int]) -> int:
        seen = self._seen
        lo, hi = 0, len(keys)
        if hi == 0 or keys[0] not in seen:
            return 0
        if keys[hi - 1] in seen:
            return hi
        lo += 1  # invariant: keys[:lo] seen, keys[hi-1] not seen
        while lo < hi:
            mid = (lo + hi) // 2
            if keys[mid] in seen:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def match_and_insert(
        self, block_hashes: BlockHashes, num_tokens: int, token_ids: TokenIds | None = None
    ) -> PrefixMatch:
        """Match a prompt against everything inserted before, then insert it.

        ``block_hashes`` are the chained hashes of the prompt's blocks: full blocks only
        for token prompts (``token_ids`` given), full blocks plus an optional partial last
        block for hash-only prompts. Returns the longest prefix shared with any earlier
        prompt, in whole blocks and in tokens: a matched partial last block (the whole
        prompt repeats an earlier one) adds its own tokens, like a token extension, and
        no block.
        """
        bs = self.block_size_tokens
        keys: list[int] = block_hashes.tolist()
        m = self._num_seen(keys)
        if token_ids is None or not self.keep_tokens:
            self._seen.update(keys[m:])
            if m * bs > num_tokens:  # the partial last block matched
                m -= 1
                return PrefixMatch(m, num_tokens, keys[m - 1] if m else None)
            return PrefixMatch(m, m * bs, keys[m - 1] if m else None)
        deepest = keys[m - 1] if m else None

        nb = len(keys)
        raw = token_ids.astype(">u4").tobytes()
        width = 4 * bs
        query = raw[m * width : (m + 1) * width]
        ext = 0
        siblings = self._children.get(deepest)
        if siblings and query:
            i = bisect_left(siblings, query)
            best = 0
            if i < len(siblings):
                best = _common_prefix_len(siblings[i], query)
            if i > 0:
                best = max(best, _common_prefix_len(siblings[i - 1], query))
            ext = best // 4
        # Record the unseen full blocks under their parents, then the partial tail.
        children = self._children
        parent = deepest
        tokens_of = self._tokens_of
        for k in range(m, nb):
            block = raw[k * width : (k + 1) * width]
            lst = children.get(parent)
            if lst is None:
                children[parent] = [block]
            else:
                insort(lst, block)
            parent = keys[k]
            tokens_of[parent] = block
        self._seen.update(keys[m:])
        tail = raw[nb * width :]
        if tail:
            lst = children.get(parent)
            if lst is None:
                children[parent] = [tail]
            else:
                j = bisect_left(lst, tail)
                if j == len(lst) or lst[j] != tail:
                    lst.insert(j, tail)
        return PrefixMatch(m, m * bs + ext, deepest)


def lcp_len(
    a: npt.NDArray[np.unsignedinteger[Any]], b: npt.NDArray[np.unsignedinteger[Any]]
) -> int:
    """Length of the common prefix of two token (or hash) arrays."""
    n = min(a.shape[0], b.shape[0])
    neq = np.flatnonzero(a[:n] != b[:n])
    return int(neq[0]) if neq.size else n


def lcp_tokens_bruteforce(prompts: list[np.ndarray]) -> list[int]:
    """Reference: per prompt, the longest common prefix with any earlier prompt (O(n^2)); for tests."""
    return [max((lcp_len(p, q) for q in prompts[:i]), default=0) for i, p in enumerate(prompts)]
