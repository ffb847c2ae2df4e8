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

Two ways to hold a request's memory. :meth:`~VllmPrefixCache.pin` takes all of it (prompt
and output) when the request starts: the cache replay (:mod:`kvroute.cache.replay.loop`) has no
engine steps. The latency replay (:mod:`kvroute.predict.replay`) steps like vLLM instead
(``Scheduler.schedule`` in ``vllm/v1/core/sched/scheduler.py`` and
``KVCacheManager.allocate_slots``, main @00024d3, the same since v0.8):
:meth:`~VllmPrefixCache.pin_steps` takes the hit plus the first scheduled chunk,
:meth:`~VllmPrefixCache.grow` the slots of each later chunk or decoded token, refusing when
the free queue is short (``num_blocks_to_allocate > get_num_free_blocks()``), and
:meth:`~VllmPrefixCache.preempt` frees a preempted request's blocks (``kv_cache_manager.free``:
recompute preemption, its full blocks stay cached for its return).

Deviations, all at the hash level: a block that is recomputed although its hash is cached
(the ``L - 1`` cap) is modelled as an uncached duplicate, where vLLM keeps a second cached
copy. Sliding-window and hybrid models are not modelled.

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
from kvroute.cache.models.shared import Admitted, check

_UNBOUNDED = 1 << 62


def _units_at(seq: CacheSeq, num_tokens: int) -> int:
    """Blocks that the first ``num_tokens`` tokens of ``seq``, grown past its end, take."""
    if num_tokens >= seq.num_tokens:
        return seq.units_for_total(num_tokens)
    return min(-(-num_tokens // seq.unit_tokens), seq.num_units)


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
        """Request id -> (its blocks in order, how many leading ones were hashed)."""
        self._stepping: dict[int, tuple[CacheSeq, CacheSeq]] = {}
        """Requests started by :meth:`pin_steps`: the sequence they started with, and their
        final one."""
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
        if request_id in self._held:
            raise ValueError(f"request {request_id} is already running")
        total = seq.units_for_total(final_tokens)
        if self._num_blocks is not None and total > self._num_blocks:
            return TOO_LARGE
        return self._start(request_id, seq, total, seq.num_tokens)

    def pin_steps(
        self, request_id: int, seq: CacheSeq, final: CacheSeq, max_new_tokens: int
    ) -> Admission:
        """Start ``request_id`` the way vLLM schedules a waiting request: its hit plus
        slots for its next ``max_new_tokens`` tokens of ``seq`` (the prompt, or after a
        preemption the prompt and the tokens generated so far). ``final`` is the request's
        final sequence: :meth:`grow` caches its blocks as they fill, and a request whose
        final sequence can never fit is ``TOO_LARGE``. Later slots come from :meth:`grow`."""
        if request_id in self._held:
            raise ValueError(f"request {request_id} is already running")
        if self._num_blocks is not None and final.num_units > self._num_blocks:
            return TOO_LARGE
        upto = min(seq.num_tokens, self.match(seq) + max(max_new_tokens, 0))
        adm = self._start(request_id, seq, _units_at(seq, upto), upto)
        if adm.status is AdmitStatus.ADMITTED:
            self._stepping[request_id] = (seq, final)
        return adm

    def _start(self, request_id: int, seq: CacheSeq, total: int, upto: int) -> Admission:
        """Pin the hit and ``total`` blocks in all; cache the prompt blocks that the first
        ``upto`` tokens fill. ``NO_ROOM`` (nothing changes) when the blocks are short."""
        held = self._held
        if len(held) >= self.config.max_num_seqs:
            return NO_ROOM
        cached = self._cached
        unit = self._unit
        n_keys = seq.num_keys
        limit = max(0, min(n_keys, (seq.num_tokens - 1) // unit))
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
        new = max(total - m, 0)
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
        own_end = min(n_keys, upto // unit, len(blocks))
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

    def grow(self, request_id: int, num_tokens: int) -> bool:
        """Slots for the first ``num_tokens`` tokens of a request started by
        :meth:`pin_steps` (``allocate_slots`` for its next chunk or decoded token), and
        the hashes of the blocks those tokens fill. ``False``, with nothing changed, when
        the free queue (empty and evictable blocks) is short: the caller preempts."""
        blocks, hashed = self._held[request_id]
        seq, final = self._stepping[request_id]
        new = _units_at(seq, num_tokens) - len(blocks)
        if new > 0:
            if new > self._num_fresh() + self._num_queued:
                return False
            self._memo_seq = None
            self._allocate(new, blocks)
            self._num_pinned += new
            self._peak_pinned = max(self._peak_pinned, self._num_pinned)
        full = min(final.num_keys, num_tokens // self._unit, len(blocks))
        if full > hashed:
            cached = self._cached
            fkeys: list[object] = final.keys[hashed:full].tolist()
            for i in range(hashed, full):
                blk = blocks[i]
                if blk.key is None:
                    h = fkeys[i - hashed]
                    if cached.setdefault(h, blk) is blk:
                        blk.key = h
                        self._link(blk, blocks, i)
            self._held[request_id] = (blocks, full)
        return True

    def room_tokens(self, request_id: int) -> int:
        """Tokens a request started by :meth:`pin_steps` has slots for now."""
        blocks, _ = self._held[request_id]
        seq, _ = self._stepping[request_id]
        n = len(blocks)
        u = self._unit
        if seq.num_keys * u > seq.num_tokens and n >= seq.num_units:
            return seq.num_tokens + (n - seq.num_units) * u  # output starts a new block
        return n * u

    def free_blocks(self) -> int:
        """Blocks an allocation may take now: empty ones and evictable cached ones."""
        return self._num_fresh() + self._num_queued

    def preempt(self, request_id: int, num_computed: int) -> None:
        """Free a running request's blocks (recompute preemption). The blocks its first
        ``num_computed`` tokens fill are cached first (vLLM caches a block once full), so
        its return can hit them while they stay in the free queue."""
        self._memo_seq = None
        self.grow(request_id, min(num_computed, self.room_tokens(request_id)))
        blocks, _ = self._held.pop(request_id)
        self._stepping.pop(request_id, None)
        self._free(blocks)

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
        self._stepping.pop(request_id, None)
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
        self._free(blocks)

    def _free(self, blocks: list[_Block]) -> None:
        """Drop a request's references. A sequence's tail goes to the queue first (evicted
        first); blocks that other requests still hold only lose a reference."""
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
        holders: dict[int, int] = {}
        held: list[_Block] = []
        for blocks, start in self._held.values():
            check(len({id(b) for b in blocks}) == len(blocks), "a request holds a block twice")
            check(0 <= start <= len(blocks), "hash count out of range")
            refs = [b.ref for b in blocks]
            check(refs == sorted(refs, reverse=True), "reference counts grow along a request")
            for b in blocks:
                holders[id(b)] = holders.get(id(b), 0) + 1
                held.append(b)
        queue: list[_Block] = []
        blk = self._queue.next
        while blk is not self._queue and len(queue) <= self._num_created:
            check(blk.prev.next is blk, "broken free-queue links")
            check(blk.ref == 0, "a queued block is pinned")
            queue.append(blk)
            blk = blk.next
        check(blk is self._queue, "the free queue does not end at its sentinel")
        check(len({id(b) for b in queue}) == len(queue), "a block is queued twice")
        check(len(queue) == self._num_queued, "queued count drifted")
        for b in held:
            check(b.ref == holders[id(b)], f"block {b.key}: ref {b.ref} != holders")
        for h, b in self._cached.items():
            check(b.key == h, "a block does not hold the hash mapped to it")
        check(
            {id(b) for b in self._cached.values()} <= {id(b) for b in [*held, *queue]},
            "a cached block is neither held nor queued",
        )
        check(all(b.key is None for b in self._spare), "a spare block holds a hash")
        check(len({id(b) for b in held}) == self._num_pinned, "pinned count drifted")
        check(
            sum(1 for b in queue if b.key is not None) == self._num_cached_free,
            "evictable count drifted",
        )
        check(self._num_fresh() >= 0, "negative fresh blocks")
        if self._num_blocks is not None:
            check(
                self._num_fresh() + self._num_queued + self._num_pinned == self._num_blocks,
                "free + cached + pinned != capacity",
            )
