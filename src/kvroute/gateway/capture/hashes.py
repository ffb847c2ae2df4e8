"""Capture's block hashes: the chained hashes of a batch of prompts in one vectorised
pass (what :func:`kvroute.trace.writer.prompt_block_hashes` gives each prompt, the
partial last block included), reusing the hashes of prefixes seen before.

Long prompts mostly repeat an earlier prompt's beginning (a system prompt, the
conversation so far). :class:`PrefixHasher` keeps the hashes of a prompt's first
``c`` blocks, ``c`` a power of two (at least :data:`MIN_CHECKPOINT_BLOCKS`), keyed by
those blocks' token bytes; a later prompt that starts with the same tokens hashes only
what follows. The chain step is linear in the parent (``h = parent * P + content``),
so a continuation is hashed from the default seed with the rest of the batch and then
moved onto its parent::

    h_k(parent) = h_k(seed) + (parent - seed) * P**(k + 1)      (mod 2**64)

All of that is for numpy, whose cost is per call: when the C hash of
:func:`kvroute.trace.hashing.block_hashes` is built, each prompt is simply hashed whole by it
(about 0.6 µs for a short prompt, 3 µs for 1,000 tokens, against ~8 µs per prompt for
the vectorised pass over a batch of 100 short ones), with no memo.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import orjson

from kvroute.trace import hashing
from kvroute.trace.hashing import DEFAULT_SEED, batch_block_hashes
from kvroute.types import TokenIds

MIN_CHECKPOINT_BLOCKS = 8
"""Shorter prefixes are hashed again: looking them up costs about as much."""


class PrefixHasher:
    """Block hashes of prompt batches, with a memo of prefix hashes (least recently
    used out past ``max_memo_bytes`` of keys). Not thread-safe: one per thread."""

    def __init__(
        self,
        block_size_tokens: int,
        *,
        max_memo_bytes: int = 16 * 1024 * 1024,
        one_by_one: bool | None = None,
        render: Callable[[list[int]], bytes] = orjson.dumps,
    ) -> None:
        self.block_size_tokens = block_size_tokens
        self._render = render
        """Hashes -> the JSON array written for them (capture keys them here, so a
        remembered prefix's keyed digits are reused as the plain ones were)."""
        self.one_by_one = hashing.active() if one_by_one is None else one_by_one
        """Hash each prompt whole with :func:`kvroute.trace.hashing.block_hashes`
        (no memo): the default when its C build is loaded."""
        self.max_memo_bytes = max_memo_bytes
        self.num_prefix_hits = 0
        self._memo: OrderedDict[bytes, tuple[list[int], bytes]] = OrderedDict()
        """A prefix's token bytes -> its block hashes and their JSON digits (no brackets)."""
        self._memo_bytes = 0
        self._leads: OrderedDict[bytes, _Lead] = OrderedDict()
        """One by one: a first block's token bytes -> the prompts that begin with it."""
        self._lead_bytes = 0
        native = hashing.native()
        self._hash: Callable[[bytes, int, int, bool], list[int]] = (
            native[0] if native is not None else _python_hash
        )
        """``block_hashes(ids, block_size, parent, partial)``: the C function itself when
        built (it reads packed ids in place)."""
        self._common: Callable[[bytes, bytes], int] = (
            native[1] if native is not None else hashing.common_prefix
        )

    def _one(self, ids: bytes) -> tuple[list[int], bytes]:
        """One prompt's hashes and JSON, in C, from its ids packed as native uint32 (a
        bytes object: slicing and reading it cost a fraction of a numpy array's); a long
        prompt reuses the hashes of the prefix it shares with earlier prompts that began
        with the same block (a system prompt, a conversation so far), and hashes and
        renders only what follows."""
        block, block_hash = self.block_size_tokens, self._hash
        width = 4 * block  # bytes per block
        if len(ids) < MIN_CHECKPOINT_BLOCKS * width:
            hashes = block_hash(ids, block, DEFAULT_SEED, True)
            return hashes, self._render(hashes)
        key = ids[:width]
        lead = self._leads.get(key)
        if lead is None:
            self._keep(key, _Lead(ids))
            hashes = block_hash(ids, block, DEFAULT_SEED, True)
            return hashes, self._render(hashes)
        self._leads.move_to_end(key)
        common = self._common(ids, lead.last) // block
        self._lead_bytes += len(ids) - len(lead.last)
        lead.last = ids
        self._trim()
        shared = lead.shared
        num_shared = len(shared)
        if num_shared and common >= num_shared:
            self.num_prefix_hits += 1
            rest = block_hash(ids[num_shared * width :], block, shared[-1], True)
            if not rest:
                return list(shared), b"".join((b"[", lead.shared_json, b"]"))
            # One join: concatenating copied the ~1 KB of digits once per operator.
            rendered = b"".join((b"[", lead.shared_json, b",", self._render(rest)[1:]))
            return shared + rest, rendered
        hashes = block_hash(ids, block, DEFAULT_SEED, True)
        if common >= MIN_CHECKPOINT_BLOCKS:  # first seen, or shorter than the last
            lead.shared = hashes[:common]
            lead.shared_json = self._render(lead.shared)[1:-1]
        return hashes, self._render(hashes)

    def _keep(self, key: bytes, lead: _Lead) -> None:
        self._leads[key] = lead
        self._lead_bytes += len(lead.last)
        self._trim()

    def _trim(self) -> None:
        """Oldest first out past ``max_memo_bytes`` of kept tokens (~3x in all with
        their hashes and JSON)."""
        leads = self._leads
        while leads and 3 * self._lead_bytes > self.max_memo_bytes:
            _, old = leads.popitem(last=False)
            self._lead_bytes -= len(old.last)

    def hashes(self, token_ids: Sequence[TokenIds | bytes]) -> list[list[int]]:
        """Each prompt's block hashes (full blocks, then the partial last one)."""
        return [hashes for hashes, _ in self.hashes_json(token_ids)]

    def hashes_json(self, token_ids: Sequence[TokenIds | bytes]) -> list[tuple[list[int], bytes]]:
        """Each prompt's block hashes, and their JSON array (what ``orjson.dumps`` gives
        them: a remembered prefix's share of it is kept rendered too). A prompt's ids
        are an array, or ``bytes`` of packed native uint32 (see :func:`packed`)."""
        if not token_ids:
            return []
        if self.one_by_one:
            return [self._one(packed(ids)) for ids in token_ids]
        return self._vectorised(
            [np.frombuffer(ids, np.uint32) if isinstance(ids, bytes) else ids for ids in token_ids]
        )

    def _vectorised(self, token_ids: Sequence[TokenIds]) -> list[tuple[list[int], bytes]]:
        """:meth:`hashes_json` with numpy over the whole batch, with the prefix memo."""
        block, memo = self.block_size_tokens, self._memo
        min_tokens = MIN_CHECKPOINT_BLOCKS * block
        if all(ids.shape[0] < min_tokens for ids in token_ids):
            chained = batch_block_hashes(token_ids, block)
            return [(h, self._render(h)) for h in chained]
        known: list[tuple[list[int], bytes]] = []
        for ids in token_ids:
            found: tuple[list[int], bytes] = _NONE_KNOWN
            top = _checkpoint(ids.shape[0] // block)
            for c in (top, top // 2):
                if c < MIN_CHECKPOINT_BLOCKS:
                    break
                key = ids[: c * block].tobytes()
                hit = memo.get(key)
                if hit is not None:
                    memo.move_to_end(key)
                    self.num_prefix_hits += 1
                    found = hit
                    break
            known.append(found)
        rests = [ids[len(k[0]) * block :] for ids, k in zip(token_ids, known, strict=True)]
        parents = [k[0][-1] if k[0] else DEFAULT_SEED for k in known]
        out: list[tuple[list[int], bytes]] = []
        for ids, (k, k_json), h in zip(
            token_ids, known, batch_block_hashes(rests, block, parents), strict=True
        ):
            if not k:
                hashes, rendered = h, self._render(h)
            elif h:  # the remembered digits, then the new ones (no brackets doubled)
                hashes, rendered = k + h, b"[" + k_json + b"," + self._render(h)[1:]
            else:
                hashes, rendered = k, b"[" + k_json + b"]"
            out.append((hashes, rendered))
            c = _checkpoint(ids.shape[0] // block)
            if c >= MIN_CHECKPOINT_BLOCKS and c > len(k):
                self._remember(ids[: c * block].tobytes(), hashes[:c])
        return out

    def _remember(self, key: bytes, hashes: list[int]) -> None:
        memo = self._memo
        memo[key] = (hashes, self._render(hashes)[1:-1])
        self._memo_bytes += 3 * len(key)  # the key, ~40 bytes per 16-token block, the JSON
        while memo and self._memo_bytes > self.max_memo_bytes:
            old_key, _ = memo.popitem(last=False)
            self._memo_bytes -= 3 * len(old_key)


_NONE_KNOWN: tuple[list[int], bytes] = ([], b"")


def _python_hash(ids: bytes, block_size_tokens: int, parent: int, partial: bool) -> list[int]:
    return hashing.block_hashes(ids, block_size_tokens, parent, partial=partial)


def packed(ids: TokenIds | bytes) -> bytes:
    """A prompt's ids as ``bytes`` of native uint32 (unchanged when they are already)."""
    if type(ids) is bytes:
        return ids
    return np.ascontiguousarray(ids, dtype=np.uint32).tobytes()


class _Lead:
    """The prompts that begin with one block: the last one's tokens, and the full
    blocks it was found to share with the one before it (their hashes and JSON digits;
    the share only shrinks, so prompts that alternate between conversations keep
    their common system prompt)."""

    __slots__ = ("last", "shared", "shared_json")

    def __init__(self, last: bytes) -> None:
        self.last = last
        self.shared: list[int] = []
        self.shared_json = b""


def _checkpoint(num_full_blocks: int) -> int:
    """The largest power of two not above ``num_full_blocks`` (0 for none)."""
    return 1 << (num_full_blocks.bit_length() - 1) if num_full_blocks else 0
