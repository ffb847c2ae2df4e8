"""vLLM's automatic prefix caching (APC), V1 engine, as a block-level model.

Follows vLLM's V1 KV cache manager (v0.8 to v0.11 and main as of 2025; read at
vllm-project/vllm ``vllm/v1/core/kv_cache_manager.py`` @003df29, ``block_pool.py``,
``kv_cache_utils.py`` (``FreeKVCacheBlockQueue``) and ``single_type_kv_cache_manager.py``):

- The pool is ``capacity // block_size`` blocks, one of which is the reserved null block.
- Only full blocks are cached, keyed by chained block hashes.
- A hit is the longest run of cached leading blocks, capped at ``prompt_len - 1`` tokens
  and block aligned (``get_computed_blocks``: ``max_cache_hit_length = num_tokens - 1``),
  so a fully cached prompt recomputes its whole last block.
- Blocks held by running requests are pinned by a reference count (``touch`` takes a hit
  block out of the free queue; ``free_blocks`` puts it back at ref count 0).
- The free queue holds empty and evictable cached blocks in eviction order. Allocation pops
  from its head and evicts a popped cached block (``get_new_blocks`` /
  ``_maybe_evict_cached_block``); a finished request's blocks are appended to its tail in
  reverse order, so a sequence's tail blocks go before its head.
- Prompt blocks are cached when allocated; blocks filled by generated tokens are cached too.

Deviations, all at the hash level: a block that is recomputed although its hash is cached
(the ``L - 1`` cap) is modelled as an uncached duplicate, where vLLM keeps a second cached
copy. Memory for a request's output is taken when it starts (vLLM grows it during decode
and preempts when short; the replay has no decode steps). Chunked prefill, preemption,
sliding-window and hybrid models are not modelled.

Layout of the free queue (head evicted first)::

    [ fresh: never used, a count ][ _queue_*: freed blocks, oldest first ......... tail ]

``_state[block]`` is the block's reference count while pinned (> 0) and a unique negative
tag while it waits in the free queue (< 0); it is never 0. A queue entry (``_queue_blocks[i]``,
``_queue_tags[i]``) is live only while ``_state[block] == tag``: a hit takes a block out of
the queue by changing its state, so touching, freeing and re-freeing are dictionary updates,
not list surgery. Two orders along a sequence let binary searches replace per-block passes:
cached blocks form a prefix, and reference counts never grow. Per-block work is left to
plain loops (one dict store each), which on CPython 3.11 beat ``dict.update(zip(...))``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import eq

from kvroute.cache.base import (
    NO_ROOM,
    TOO_LARGE,
    Admission,
    AdmitStatus,
    Admitted,
    CacheGeometry,
    CacheSeq,
    CacheStats,
    CacheUsage,
    check,
)

_UNBOUNDED = 1 << 62
_NEGATIVE = (0).__gt__


@dataclass(frozen=True, slots=True)
class VllmConfig:
    block_size_tokens: int = 16
    """``--block-size`` (16 on GPU). Hash-only traces use their own block size instead."""
    max_num_seqs: int = 256
    """``--max-num-seqs``: running requests at most (256; vLLM picks 1024 on >= 70 GiB GPUs other than A100)."""


class VllmPrefixCache:
    """vLLM V1 prefix caching over blocks of ``unit_tokens`` tokens.

    Blocks are named by their chained hash (>= 0) when cached, by a unique negative id
    while empty. Never-used blocks are only counted (``_fresh``).
    """

    name = "vllm"

    def __init__(self, config: VllmConfig, geometry: CacheGeometry) -> None:
        self.config = config
        self._unit = geometry.block_size_tokens or config.block_size_tokens
        if geometry.capacity_tokens is None:
            self._num_blocks: int | None = None
            self._fresh = _UNBOUNDED
        else:
            self._num_blocks = max(geometry.capacity_tokens // self._unit - 1, 0)
            self._fresh = self._num_blocks
        self._queue_blocks: list[int] = []
        self._queue_tags: list[int] = []
        self._head = 0
        """Entries before ``_head`` were popped; compacted now and then."""
        self._state: dict[int, int] = {}
        self._held: dict[int, tuple[list[int], int, int]] = {}
        """Request id -> (its blocks in order, how many hold prompt hashes, how many no hash)."""
        self._next_empty = -1
        self._stamp = 0
        self._closed = True
        """Whether cached blocks are known to be prefix-closed along every sequence."""
        self._num_queued = 0
        self._num_pinned = 0
        self._num_cached_free = 0
        self._peak_pinned = 0
        self._evicted_blocks = 0
        self._num_evictions = 0
        self._next_insert_id = -1
        self._admitted = Admitted()

    @property
    def unit_tokens(self) -> int:
        return self._unit

    @property
    def needs_token_ids(self) -> bool:
        return False

    @property
    def capacity_tokens(self) -> int | None:
        return None if self._num_blocks is None else self._num_blocks * self._unit

    def _hit_limit(self, seq: CacheSeq) -> int:
        """Blocks that may hit: full blocks only, at most ``num_tokens - 1`` tokens."""
        return max(0, min(seq.num_keys, (seq.num_tokens - 1) // self._unit))

    def match(self, seq: CacheSeq) -> int:
        state = self._state
        m = 0
        for h in seq.keys[: self._hit_limit(seq)].tolist():
            if h not in state:
                break
            m += 1
        return m * self._unit

    def pin(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        held = self._held
        if request_id in held:
            raise ValueError(f"request {request_id} is already running")
        total = seq.units_for_total(final_tokens)
        if self._num_blocks is not None and total > self._num_blocks:
            return TOO_LARGE
        if len(held) >= self.config.max_num_seqs:
            return NO_ROOM
        state = self._state
        keys: list[int] = seq.keys.tolist()
        unit = self._unit
        limit = max(0, min(len(keys), (seq.num_tokens - 1) // unit))
        # Cached blocks are prefix-closed along a sequence (a block is freed no earlier than
        # its children, so evicted no earlier), so a binary search finds where the hit ends.
        # Only a generated block cached behind an uncached twin can break that; from then
        # on the hit is confirmed block by block (None, a miss, ends it as a scan would).
        m = bisect_left(range(limit), True, key=lambda i: keys[i] not in state)
        if not self._closed:
            found = list(map(state.get, keys[:m]))
            if None in found:
                m = found.index(None)
        hits = keys[:m]
        # Reference counts never grow along a sequence (whoever pins a block pins its
        # prefix), so the pinned hits (> 0) come first and the queued ones (< 0) after.
        pinned = bisect_left(hits, True, key=lambda h: state[h] < 0)
        queued = m - pinned
        new = total - m
        if new > self._fresh + self._num_queued - queued:
            return NO_ROOM
        if pinned:  # touch: reference counts go up; queued hits leave the free queue
            for h in hits[:pinned]:
                state[h] += 1
        if queued:
            for h in hits[pinned:]:
                state[h] = 1
            self._num_queued -= queued
            self._num_cached_free -= queued
            self._num_pinned += queued
        if new:
            self._allocate(new)
        # Cached blocks are prefix-closed (a block is freed no earlier than its children),
        # so only the block after a capped hit can already be cached: vLLM recomputes it
        # into a duplicate block, modelled as uncached.
        own = keys[m : min(len(keys), seq.num_tokens // unit)]
        dup = m == limit and bool(own) and own[0] in state
        if dup:
            own = [self._new_empty()]
        n_empty = new - len(own)
        n_neg = n_empty + dup  # blocks without a hash
        blocks = hits + own
        if own:
            for h in own:
                state[h] = 1
        if n_empty:
            first = self._next_empty
            empties = range(first, first - n_empty, -1)
            self._next_empty = first - n_empty
            for b in empties:
                state[b] = 1
            blocks += empties
        self._num_pinned += new
        self._peak_pinned = max(self._peak_pinned, self._num_pinned)
        held[request_id] = (blocks, m + len(own), n_neg)
        return self._admitted[m * unit]

    def _new_empty(self) -> int:
        b = self._next_empty
        self._next_empty -= 1
        return b

    def _allocate(self, n: int) -> None:
        """Take ``n`` blocks from the free queue head, evicting the cached ones popped."""
        take = min(self._fresh, n)
        self._fresh -= take
        n -= take
        if not n:
            return
        blocks, tags, state = self._queue_blocks, self._queue_tags, self._state
        self._num_queued -= n
        check(self._num_queued >= 0, "the free queue ran out of live blocks")
        # Pop live entries; stale ones (blocks touched or re-freed since) are skipped.
        # A plain loop: at ~20 blocks a request it beats batched C passes over a guess.
        head, get = self._head, state.get
        evicted = 0
        while n:
            b = blocks[head]
            if get(b) == tags[head]:
                del state[b]
                n -= 1
                if b >= 0:
                    evicted += 1
            head += 1
        self._head = head
        if evicted:
            self._num_cached_free -= evicted
            self._evicted_blocks += evicted
            self._num_evictions += 1
        if head > 4096 and 2 * head > len(blocks):
            del blocks[:head]
            del tags[:head]
            self._head = 0

    def unpin(self, request_id: int, final: CacheSeq) -> None:
        blocks, start, n_neg = self._held.pop(request_id)
        state = self._state
        n_full = min(final.num_keys, final.num_tokens // self._unit, len(blocks))
        if n_full > start:
            # Blocks filled by generated tokens get their hashes (vLLM caches them).
            fkeys: list[int] = final.keys[start:n_full].tolist()
            for i, h in enumerate(fkeys, start):
                b = blocks[i]
                if b < 0 and h not in state:
                    del state[b]
                    state[h] = 1
                    blocks[i] = h
                    n_neg -= 1
                else:
                    self._closed = False
        # Reference counts never grow along a sequence, so the blocks that other requests
        # still hold come first; the rest drop to 0 and are freed.
        kept = bisect_left(blocks, True, key=lambda b: state[b] == 1)
        if kept:
            for b in blocks[:kept]:
                state[b] -= 1
        freed = blocks[kept:]
        n = len(freed)
        if n:
            freed.reverse()  # a sequence's tail goes to the queue first: evicted first
            base = -self._stamp - 1
            self._stamp += n
            tags = range(base, base - n, -1)
            for b, t in zip(freed, tags, strict=True):
                state[b] = t
            self._queue_blocks += freed
            self._queue_tags += tags
            self._num_queued += n
            self._num_pinned -= n
            self._num_cached_free += n - n_neg
            if len(self._queue_blocks) - self._head > 4 * self._num_queued + (1 << 18):
                self._compact()

    def _compact(self) -> None:
        """Drop queue entries of blocks that were touched or re-freed since they were queued."""
        head, get = self._head, self._state.get
        blocks, tags = self._queue_blocks[head:], self._queue_tags[head:]
        live = list(map(eq, map(get, blocks), tags))
        self._queue_blocks = list(compress(blocks, live))
        self._queue_tags = list(compress(tags, live))
        self._head = 0

    def insert(self, seq: CacheSeq) -> int:
        rid = self._next_insert_id
        self._next_insert_id -= 1
        adm = self.pin(rid, seq, seq.num_tokens)
        if adm.status is not AdmitStatus.ADMITTED:
            return 0
        self.unpin(rid, seq)
        return adm.cached_tokens

    def evict(self, num_tokens: int) -> int:
        """Pop the free queue head until enough cached blocks are gone; popped blocks
        become empty blocks (counted with the never-used ones)."""
        blocks, tags, state = self._queue_blocks, self._queue_tags, self._state
        evicted = 0
        while self._head < len(blocks) and evicted * self._unit < num_tokens:
            b, tag = blocks[self._head], tags[self._head]
            self._head += 1
            if state.get(b) != tag:
                continue
            del state[b]
            self._num_queued -= 1
            self._fresh += 1
            if b >= 0:
                evicted += 1
        if evicted:
            self._num_cached_free -= evicted
            self._evicted_blocks += evicted
            self._num_evictions += 1
        return evicted * self._unit

    def schedule_order(
        self, waiting: Sequence[CacheSeq], *, num_released: int = 0
    ) -> Sequence[int]:
        return range(len(waiting))  # FCFS

    def release_order(self, request_ids: Sequence[int]) -> Sequence[int]:
        return request_ids  # finished requests leave the running batch together, in order

    def usage(self) -> CacheUsage:
        u = self._unit
        pinned, cached = self._num_pinned * u, self._num_cached_free * u
        cap = self.capacity_tokens
        return CacheUsage(
            capacity_tokens=cap,
            free_tokens=None if cap is None else cap - pinned - cached,
            cached_tokens=cached,
            pinned_tokens=pinned,
            num_running=len(self._held),
        )

    def stats(self) -> CacheStats:
        return CacheStats(
            self._evicted_blocks * self._unit,
            self._num_evictions,
            self._peak_pinned * self._unit,
        )

    def check_invariants(self) -> None:
        state = self._state
        holders: dict[int, int] = {}
        for blocks, start, n_neg in self._held.values():
            check(len(set(blocks)) == len(blocks), "a request holds a block twice")
            check(0 <= start <= len(blocks), "hash count out of range")
            check(n_neg == sum(1 for b in blocks if b < 0), "hashless block count drifted")
            refs = [state.get(b, 0) for b in blocks]
            check(refs == sorted(refs, reverse=True), "reference counts grow along a request")
            for b in blocks:
                holders[b] = holders.get(b, 0) + 1
        head = self._head
        queue = zip(self._queue_blocks[head:], self._queue_tags[head:], strict=True)
        live = [b for b, t in queue if state.get(b) == t]
        check(len(live) == len(set(live)), "a block is queued twice")
        check(len(live) == self._num_queued, "queued count drifted")
        for b, r in state.items():
            if r > 0:
                check(r == holders.get(b, 0), f"block {b}: ref {r} != holders")
            else:
                check(b not in holders, f"block {b}: free but held")
        check(set(live) == {b for b, r in state.items() if r < 0}, "free queue != free blocks")
        check(all(b in state and state[b] > 0 for b in holders), "a held block is not pinned")
        check(sum(1 for r in state.values() if r > 0) == self._num_pinned, "pinned count drifted")
        check(sum(1 for b in live if b >= 0) == self._num_cached_free, "evictable count drifted")
        check(self._fresh >= 0, "negative fresh blocks")
        if self._num_blocks is not None:
            check(
                self._fresh + self._num_queued + self._num_pinned == self._num_blocks,
                "free + cached + pinned != capacity",
            )
