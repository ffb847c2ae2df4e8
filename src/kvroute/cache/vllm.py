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

Layout, as in vLLM: block objects with a reference count, the hash they hold (``None``:
none) and links in a doubly linked free queue (a sentinel block closes the ring), plus a
hash -> block map of cached blocks. Blocks are created on first use. A hit block with
reference count 0 leaves the queue in O(1); a finished request's blocks that drop to 0
are appended at the tail. Allocation takes never-used blocks (and blocks emptied by
:meth:`evict`) first, then pops the queue head, evicting the hash a popped block held.
Written for the compiled build (``kvroute._accel``): plain loops and attribute
updates on small objects, which mypyc turns into C struct accesses; hashes are kept as
Python objects so they are never unboxed and boxed again. The Python source gives the
same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvroute.cache.base import (
    NO_ROOM,
    TOO_LARGE,
    Admission,
    AdmitStatus,
    CacheGeometry,
    CacheSeq,
    CacheStats,
    CacheUsage,
)
from kvroute.cache.invariants import vllm_invariants
from kvroute.cache.shared import Admitted, check

_UNBOUNDED = 1 << 62


class _Block:
    """One physical KV block. Links point at the block itself while it is not queued."""

    __slots__ = ("gen", "key", "next", "parent", "parent_gen", "prev", "ref")

    def __init__(self) -> None:
        self.ref = 0
        self.key: object = None
        """The chained hash the block holds (cached), ``None`` when empty."""
        self.prev: _Block = self
        self.next: _Block = self
        self.gen = 0
        """Bumped whenever the block is taken for new content."""
        self.parent: _Block | None = None
        """The block that held the previous hash of the chain when this one was cached."""
        self.parent_gen = 0


@dataclass(frozen=True, slots=True)
class VllmConfig:
    block_size_tokens: int = 16
    """``--block-size`` (16 on GPU). Hash-only traces use their own block size instead."""
    max_num_seqs: int = 256
    """``--max-num-seqs``: running requests at most (256; vLLM picks 1024 on >= 70 GiB GPUs other than A100)."""


class VllmPrefixCache:
    """vLLM V1 prefix caching over blocks of ``unit_tokens`` tokens."""

    name = "vllm"

    def __init__(self, config: VllmConfig, geometry: CacheGeometry) -> None:
        self.config = config
        self._unit = geometry.block_size_tokens or config.block_size_tokens
        if geometry.capacity_tokens is None:
            self._num_blocks: int | None = None
            self._limit = _UNBOUNDED
        else:
            self._num_blocks = max(geometry.capacity_tokens // self._unit - 1, 0)
            self._limit = self._num_blocks
        self._queue = _Block()
        """The free queue's sentinel: ``_queue.next`` is the head, ``_queue.prev`` the tail."""
        self._num_created = 0
        self._spare: list[_Block] = []
        """Blocks :meth:`evict` emptied: taken like never-used ones, before the queue."""
        self._cached: dict[object, _Block] = {}
        self._held: dict[int, tuple[list[_Block], int]] = {}
        """Request id -> (its blocks in order, how many hold prompt hashes)."""
        self._num_queued = 0
        self._num_pinned = 0
        self._num_cached_free = 0
        self._peak_pinned = 0
        self._evicted_blocks = 0
        self._num_evictions = 0
        self._next_insert_id = -1
        self._admitted = Admitted()
        # The last match's run of hits, for a pin of the same sequence right after it
        # (the gateway asks, then pins in the backend it chose); any change forgets it.
        self._memo_seq: CacheSeq | None = None
        self._memo_limit = 0
        self._memo_run: list[_Block] = []

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

    def _num_fresh(self) -> int:
        """Never-used blocks plus spare ones: allocated before the free queue."""
        return self._limit - self._num_created + len(self._spare)

    def match(self, seq: CacheSeq) -> int:
        limit = self._hit_limit(seq)
        run = self._hits(seq, limit)
        self._memo_seq, self._memo_limit, self._memo_run = seq, limit, run
        return len(run) * self._unit

    def _hits(self, seq: CacheSeq, limit: int) -> list[_Block]:
        """The cached blocks of the longest cached run of ``seq.keys[:limit]``, in order.

        Cached blocks are nearly always prefix-closed along a sequence (a block is freed
        no earlier than the blocks after it), so a binary search on the hash map finds
        where the run ends, and the run is confirmed by walking parent links back from
        its last block instead of one lookup per block. A link is good while the parent
        still holds the content it held when the child was cached; otherwise (a
        generated block cached behind an uncached twin, a reused parent) every key is
        looked up, as vLLM does. The search reads single keys off the array (a long
        prompt's keys are converted to Python ints only where a scan needs them all).
        """
        cached = self._cached
        keys = seq.keys
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi) // 2
            if int(keys[mid]) in cached:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return []
        blk = cached[int(keys[lo - 1])]
        run = [blk]
        for _ in range(lo - 1):
            parent = blk.parent
            if parent is None or parent.gen != blk.parent_gen or parent.key is None:
                return self._scan(seq.key_list(), limit)
            run.append(parent)
            blk = parent
        if blk.parent is not None:
            return self._scan(seq.key_list(), limit)
        run.reverse()
        return run

    def _scan(self, keys: list[object], limit: int) -> list[_Block]:
        """The cached blocks of ``keys[:limit]`` up to the first miss, one lookup each."""
        cached = self._cached
        run: list[_Block] = []
        for i in range(limit):
            blk = cached.get(keys[i])
            if blk is None:
                break
            run.append(blk)
        return run

    def _link(self, blk: _Block, blocks: list[_Block], i: int) -> None:
        """``blk`` (at position ``i`` of ``blocks``) was just cached: link its parent."""
        parent = blocks[i - 1] if i else None
        if parent is not None and parent.key is None:
            parent = None  # an uncached twin: no good link (the walk falls back)
        blk.parent = parent
        if parent is not None:
            blk.parent_gen = parent.gen

    def pin(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        held = self._held
        if request_id in held:
            raise ValueError(f"request {request_id} is already running")
        total = seq.units_for_total(final_tokens)
        if self._num_blocks is not None and total > self._num_blocks:
            return TOO_LARGE
        if len(held) >= self.config.max_num_seqs:
            return NO_ROOM
        cached = self._cached
        unit = self._unit
        num_tokens = seq.num_tokens
        n_keys = seq.num_keys
        limit = max(0, min(n_keys, (num_tokens - 1) // unit))
        if seq is self._memo_seq and limit == self._memo_limit:
            blocks = self._memo_run.copy()
        else:
            blocks = self._hits(seq, limit)
        self._memo_seq = None
        queued = 0
        for blk in blocks:
            if blk.ref == 0:
                queued += 1
        m = len(blocks)
        new = total - m
        if new > self._num_fresh() + self._num_queued - queued:
            return NO_ROOM
        # touch: reference counts go up; hits with count 0 leave the free queue
        for blk in blocks:
            if blk.ref == 0:
                p, q = blk.prev, blk.next
                p.next = q
                q.prev = p
            blk.ref += 1
        if queued:
            self._num_queued -= queued
            self._num_cached_free -= queued
            self._num_pinned += queued
        if new:
            self._allocate(new, blocks)
        # Only the block after a capped hit can already be cached (the L - 1 cap): vLLM
        # recomputes it into a duplicate block, modelled as uncached. A prompt block whose
        # hash another block already holds stays uncached the same way.
        own_end = min(n_keys, num_tokens // unit)
        new_keys: list[object] = seq.keys[m:own_end].tolist() if own_end > m else []
        for i in range(m, own_end):
            h = new_keys[i - m]
            blk = blocks[i]
            if cached.setdefault(h, blk) is blk:
                blk.key = h
                self._link(blk, blocks, i)
        self._num_pinned += new
        self._peak_pinned = max(self._peak_pinned, self._num_pinned)
        held[request_id] = (blocks, max(own_end, m))
        return self._admitted[m * unit]

    def _allocate(self, n: int, out: list[_Block]) -> None:
        """Append ``n`` blocks with reference count 1 to ``out``: spare and never-used
        ones first, then the free queue's head, evicting the hashes popped blocks held."""
        spare = self._spare
        while n and spare:
            blk = spare.pop()
            blk.gen += 1
            blk.ref = 1
            out.append(blk)
            n -= 1
        grow = min(n, self._limit - self._num_created)
        if grow:
            self._num_created += grow
            n -= grow
            for _ in range(grow):
                blk = _Block()
                blk.ref = 1
                out.append(blk)
        if not n:
            return
        check(n <= self._num_queued, "the free queue ran out of blocks")
        self._num_queued -= n
        queue, cached = self._queue, self._cached
        evicted = 0
        for _ in range(n):
            blk = queue.next
            q = blk.next
            queue.next = q
            q.prev = queue
            blk.prev = blk.next = blk
            h = blk.key
            if h is not None:
                del cached[h]
                blk.key = None
                evicted += 1
            blk.gen += 1
            blk.ref = 1
            out.append(blk)
        if evicted:
            self._num_cached_free -= evicted
            self._evicted_blocks += evicted
            self._num_evictions += 1

    def unpin(self, request_id: int, final: CacheSeq) -> None:
        self._memo_seq = None
        blocks, start = self._held.pop(request_id)
        cached = self._cached
        n_full = min(final.num_keys, final.num_tokens // self._unit, len(blocks))
        if n_full > start:
            # Blocks filled by generated tokens get their hashes (vLLM caches them).
            fkeys: list[object] = final.keys[start:n_full].tolist()
            for i in range(start, n_full):
                blk = blocks[i]
                if blk.key is None:
                    h = fkeys[i - start]
                    if cached.setdefault(h, blk) is blk:
                        blk.key = h
                        self._link(blk, blocks, i)
        # A sequence's tail goes to the queue first (evicted first); blocks that other
        # requests still hold only lose a reference.
        queue = self._queue
        freed = 0
        freed_cached = 0
        for i in range(len(blocks) - 1, -1, -1):
            blk = blocks[i]
            blk.ref -= 1
            if blk.ref == 0:
                tail = queue.prev
                tail.next = blk
                blk.prev = tail
                blk.next = queue
                queue.prev = blk
                freed += 1
                if blk.key is not None:
                    freed_cached += 1
        self._num_queued += freed
        self._num_pinned -= freed
        self._num_cached_free += freed_cached

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
        become empty spare blocks (allocated like never-used ones)."""
        self._memo_seq = None
        queue, cached = self._queue, self._cached
        evicted = 0
        while queue.next is not queue and evicted * self._unit < num_tokens:
            blk = queue.next
            q = blk.next
            queue.next = q
            q.prev = queue
            blk.prev = blk.next = blk
            self._num_queued -= 1
            self._spare.append(blk)
            h = blk.key
            if h is not None:
                del cached[h]
                blk.key = None
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
        vllm_invariants(self)
