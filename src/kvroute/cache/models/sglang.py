"""SGLang's RadixAttention prefix cache, with its admission and cache-aware scheduling.

Follows SGLang main as of 2025 (v0.5 line), read at sgl-project/sglang:
``python/sglang/srt/mem_cache/radix_cache.py`` @006b0e3 (``match_prefix``, ``insert``,
``cache_finished_req``, ``cache_unfinished_req``, ``evict``, lock refs; the tree itself is
:mod:`kvroute.cache.models.radix`), ``mem_cache/evict_policy.py``, ``mem_cache/common.py``
(``evict_from_tree_cache``), ``managers/schedule_batch.py`` (``adjust_max_prefix_ids``)
and ``managers/schedule_policy.py`` @00550cd (LPM, its FCFS fallback above 128 waiting
requests, in-batch prefix deprioritisation):

- A radix tree of tokens (``page_size = 1``) or pages; a hash-only trace's blocks are its
  units. Matches are page aligned and capped at ``prompt_len - 1`` tokens.
- A match splits the node it ends inside, refreshes access times along the path and locks
  the path for the running request.
- The prompt enters the tree when its prefill is done (``cache_unfinished_req``), prompt
  plus output when the request finishes (``cache_finished_req``); the path is then unlocked.
- When the pool is short, SGLang asks the tree to evict the *whole* allocation size, not
  the shortfall (``evict_from_tree_cache``), leaf by leaf in policy order (LRU by default),
  whole nodes at a time, parents joining when they become leaves.
- Scheduling: FCFS (SGLang's default) or LPM, which sorts waiting requests by cached prefix,
  puts requests that share a long prefix with an earlier waiting one last, and falls back
  to FCFS when more than 128 wait.

Deviations: :meth:`~SglangPrefixCache.pin` (the cache replay, which has no engine steps)
inserts the prompt when the request starts rather than when its prefill batch ends, so a
request arriving during that prefill already hits it; the latency replay pins with
:meth:`~SglangPrefixCache.pin_deferred` and inserts at the end of the prefill batch
(:meth:`~SglangPrefixCache.prefilled`), so requests prefilled together do not hit each
other. A chunked prompt enters the tree when its last chunk is done (SGLang inserts each
chunk). Memory for the
output is taken at start (SGLang reserves an estimate and retracts when short). Chunked
prefill, retraction, HiCache and the C++ tree are not modelled.
"""

from __future__ import annotations

import enum
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
    units_for,
)
from kvroute.cache.models.radix import EvictionPolicy, Keys, Node, RadixTree, Walk
from kvroute.cache.models.shared import Admitted, check

LPM_MAX_WAITING = 128
IN_BATCH_PREFIX_TOKENS = 32
_UNBOUNDED = 1 << 62


class SchedulePolicy(enum.Enum):
    """SGLang ``--schedule-policy`` values modelled here."""

    FCFS = "fcfs"
    LPM = "lpm"


@dataclass(frozen=True, slots=True)
class SglangConfig:
    page_size: int = 1
    """``--page-size`` in tokens (1: token-level radix tree)."""
    eviction_policy: EvictionPolicy = EvictionPolicy.LRU
    schedule_policy: SchedulePolicy = SchedulePolicy.FCFS
    max_running_requests: int | None = None
    """``--max-running-requests``; ``None``: limited by memory only."""


class _Running:
    """A running request (a plain class: built per request, see radix.Walk)."""

    __slots__ = ("depth", "node", "owned")

    def __init__(self, node: Node, depth: int, owned: int) -> None:
        self.node = node
        """Deepest locked node: the end of the prompt's keyed units in the tree."""
        self.depth = depth
        """Units from the root to ``node``."""
        self.owned = owned
        """Units held outside the tree (unkeyed tail, output reservation)."""


class SglangPrefixCache:
    """RadixAttention over units of ``unit_tokens`` tokens (a page, or a trace block)."""

    name = "sglang"

    def __init__(self, config: SglangConfig, geometry: CacheGeometry) -> None:
        self.config = config
        self._unit = geometry.block_size_tokens or config.page_size
        self._align = config.page_size
        cap = geometry.capacity_tokens
        self._capacity: int | None = None if cap is None else cap // self._unit
        self._tree = RadixTree(config.eviction_policy)
        self._running: dict[int, _Running] = {}
        self._owned = 0
        self._evicted_units = 0
        self._num_evictions = 0
        self._evicted_nodes = 0
        self._peak_pinned = 0
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
        return None if self._capacity is None else self._capacity * self._unit

    def _free_units(self) -> int:
        cap = _UNBOUNDED if self._capacity is None else self._capacity
        return cap - self._tree.total_units - self._owned

    def _hit(self, seq: CacheSeq, keys: Keys) -> tuple[Walk, int]:
        """The walk and the hit in tokens: page aligned, at most ``num_tokens - 1``.
        ``keys``: ``seq.keys`` as a list."""
        cap = (seq.num_tokens - 1) // self._align * self._align
        if cap <= 0:
            return Walk([], 0), 0
        walk = self._tree.walk(keys, units_for(cap, self._unit))
        hit = min(seq.tokens_in(walk.matched), cap)
        return walk, hit // self._align * self._align

    def match(self, seq: CacheSeq) -> int:
        return self._hit(seq, seq.key_list())[1]

    def pin(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        adm = self._reserve(request_id, seq, final_tokens)
        if adm.status is AdmitStatus.ADMITTED:
            self.prefilled(request_id, seq)
            self._note_peak()
        return adm

    def pin_deferred(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        """:meth:`pin` without the prompt entering the tree: the latency replay calls
        :meth:`prefilled` at the end of the prefill batch, as SGLang does (requests
        prefilled in one batch cannot hit each other's prompts)."""
        adm = self._reserve(request_id, seq, final_tokens)
        if adm.status is AdmitStatus.ADMITTED:
            self._note_peak()
        return adm

    def _note_peak(self) -> None:
        self._peak_pinned = max(self._peak_pinned, self._tree.protected_units + self._owned)

    def _reserve(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission:
        """Admission: lock the hit, take memory for the rest of the final sequence."""
        if request_id in self._running:
            raise ValueError(f"request {request_id} is already running")
        total = seq.units_for_total(final_tokens)
        if self._capacity is not None and total > self._capacity:
            return TOO_LARGE
        limit = self.config.max_running_requests
        if limit is not None and len(self._running) >= limit:
            return NO_ROOM
        tree = self._tree
        keys = seq.key_list()
        walk, hit = self._hit(seq, keys)
        lock_units = hit // self._unit
        need = total - lock_units
        free = self._free_units()
        if need > free:
            # Evictable units that locking our own prefix takes off the table.
            path_unlocked = 0
            done = 0
            for node, k in walk.steps:
                if done >= lock_units:
                    break
                take = min(k, lock_units - done)
                if node.lock_ref == 0:
                    path_unlocked += take
                done += take
            if need > free + tree.evictable_units - path_unlocked:
                return NO_ROOM
        node = tree.lock(walk, lock_units)
        if need > free:
            self._evict_units(need)
        self._owned += need
        self._running[request_id] = _Running(node, lock_units, need)
        return self._admitted[hit]

    def prefilled(self, request_id: int, seq: CacheSeq) -> None:
        """``cache_unfinished_req`` once ``seq`` (the prompt ``request_id`` was pinned
        with) is computed: its keyed units enter the tree; copies of units that were
        already there are freed."""
        run = self._running[request_id]
        n = seq.num_keys
        if n <= run.depth:
            return
        # The lock moves from ``run.node`` down to ``last``: that path is locked already,
        # so inc_lock(last) + dec_lock(node) only changes the nodes below it.
        last, _present = self._tree.insert(run.node, seq.key_list(), run.depth, lock_from=run.node)
        self._owned -= n - run.depth
        run.owned -= n - run.depth
        run.node = last
        run.depth = n

    def _evict_units(self, units: int) -> int:
        evicted, nodes = self._tree.evict(units)
        if evicted:
            self._evicted_units += evicted
            self._evicted_nodes += nodes
            self._num_evictions += 1
        return evicted

    def unpin(self, request_id: int, final: CacheSeq) -> None:
        run = self._running.pop(request_id)
        tree = self._tree
        # cache_finished_req: prompt + output (what has KV) enters the tree, page aligned.
        _last, present = tree.insert(run.node, final.keys[run.depth :].tolist())
        added = final.num_keys - run.depth - present
        if added > run.owned:
            raise ValueError(f"request {request_id}: final sequence outgrew its reservation")
        self._owned -= run.owned
        tree.dec_lock(run.node)

    def insert(self, seq: CacheSeq) -> int:
        rid = self._next_insert_id
        self._next_insert_id -= 1
        adm = self.pin(rid, seq, seq.num_tokens)
        if adm.status is not AdmitStatus.ADMITTED:
            return 0
        self.unpin(rid, seq)
        return adm.cached_tokens

    def evict(self, num_tokens: int) -> int:
        return self._evict_units(units_for(num_tokens, self._unit)) * self._unit

    def schedule_order(
        self, waiting: Sequence[CacheSeq], *, num_released: int = 0
    ) -> Sequence[int]:
        n = len(waiting)
        if self.config.schedule_policy is SchedulePolicy.FCFS or n > LPM_MAX_WAITING:
            return range(n)
        hits = [self.match(seq) for seq in waiting]
        # In-batch prefix caching: of several waiting requests that share a prefix no cache
        # holds yet, only the first goes early; the others wait for it to be cached.
        seen: set[object] = set()
        late: set[int] = set()
        for i, seq in enumerate(waiting):
            if hits[i] > IN_BATCH_PREFIX_TOKENS:
                continue
            keys = seq.key_list()
            m = 0
            while m < len(keys) and keys[m] in seen:
                m += 1
            if seq.tokens_in(m) >= IN_BATCH_PREFIX_TOKENS:
                late.add(i)
            else:
                seen.update(keys)
        return sorted(range(n), key=lambda i: (i in late, -hits[i] if i not in late else 0))

    def release_order(self, request_ids: Sequence[int]) -> Sequence[int]:
        return request_ids  # finished requests leave the running batch together, in order

    def usage(self) -> CacheUsage:
        u = self._unit
        tree = self._tree
        pinned = (tree.protected_units + self._owned) * u
        cached = tree.evictable_units * u
        cap = self.capacity_tokens
        return CacheUsage(
            capacity_tokens=cap,
            free_tokens=None if cap is None else cap - pinned - cached,
            cached_tokens=cached,
            pinned_tokens=pinned,
            num_running=len(self._running),
        )

    def stats(self) -> CacheStats:
        return CacheStats(
            self._evicted_units * self._unit,
            self._num_evictions,
            self._peak_pinned * self._unit,
            {"evicted_nodes": self._evicted_nodes},
        )

    def check_invariants(self) -> None:
        locks = self._tree.check_invariants()
        expected: dict[int, int] = {}
        for run in self._running.values():
            node: Node | None = run.node
            depth = 0
            while node is not None and node is not self._tree.root:
                expected[node.nid] = expected.get(node.nid, 0) + 1
                depth += node.size
                parent = node.parent
                check(parent is not None, f"a running request's node {node.nid} was evicted")
                check(
                    parent is None or parent.children.get(node.key[0]) is node,
                    "a running request's path is detached",
                )
                node = parent
            check(depth == run.depth, "a running request's locked depth drifted")
            check(run.owned >= 0, "negative owned units")
        for nid, count in locks.items():
            if nid != self._tree.root.nid:
                check(count == expected.get(nid, 0), f"node {nid}: lock_ref {count} != holders")
        check(self._owned == sum(r.owned for r in self._running.values()), "owned drifted")
        check(self._free_units() >= 0, "more units used than the pool holds")
