"""A radix tree over chained unit keys, with lock counts and policy-ordered leaf eviction.

The data structure of SGLang's RadixAttention (``python/sglang/srt/mem_cache/radix_cache.py``
@006b0e3: ``TreeNode``, ``_match_prefix_helper``, ``_split_node``, ``_insert_helper``,
``inc_lock_ref``/``dec_lock_ref``, ``evict``; ``evict_policy.py`` for the orders), rebuilt
on chained keys. A node holds a run of units; its children are keyed by the first key of
their run. Because keys are chained, two runs that agree on their last shared position
agree on all of it, so comparing a node with a query is a binary search, not a scan.

Mutating methods say so. Time is a logical clock that advances once per operation: the
tree never reads a real clock. Ties in eviction order are broken by node creation order
(SGLang leaves them to heap order over object ids).

Positions along a query, for a node whose run starts at unit ``pos`` of the query::

    query units   [0 .... pos) [pos ......... pos+k) [pos+k ....)
    node run                   [0 ........... k)     [k ... len) <- split here when k < len
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable

from kvroute.cache.base import U64, keys_common_prefix
from kvroute.cache.models.shared import check

Keys = list[object]
"""Chained unit keys as Python ints: indexing a list is several times cheaper than
indexing a numpy array, and the tree indexes keys once per probe. Typed ``object`` so
the compiled build passes them on as they are (an ``int`` would be unboxed on every
read and boxed again for every dictionary probe)."""


class EvictionPolicy(enum.Enum):
    """SGLang ``--radix-eviction-policy`` orders (lowest priority evicted first)."""

    LRU = "lru"
    LFU = "lfu"
    FIFO = "fifo"
    MRU = "mru"
    FILO = "filo"


class Node:
    """One run of units. ``lock_ref`` counts running requests whose path passes here."""

    __slots__ = (
        "children",
        "created",
        "hit_count",
        "key",
        "last_access",
        "lock_ref",
        "nid",
        "parent",
        "size",
    )

    def __init__(self, key: Keys, parent: Node | None, nid: int, now: int) -> None:
        self.key = key
        self.size = len(key)
        self.parent = parent
        self.children: dict[object, Node] = {}
        self.lock_ref = 0
        self.last_access = now
        self.created = now
        self.hit_count = 0
        self.nid = nid


class Walk:
    """A read-only match: the nodes passed (with how many of their units matched) and the
    matched length. Only the last step may be partial. (A plain class: one is built per
    match, and the compiled build runs a dataclass's ``__init__`` interpreted.)"""

    __slots__ = ("matched", "steps")

    def __init__(self, steps: list[tuple[Node, int]], matched: int) -> None:
        self.steps = steps
        self.matched = matched


def as_keys(keys: U64 | Keys) -> Keys:
    """Keys as a list of Python ints (a list is returned as is)."""
    return keys if isinstance(keys, list) else keys.tolist()


def _lru(node: Node) -> int:
    return node.last_access


def _lfu(node: Node) -> int:  # hit count above access time
    return (node.hit_count << 48) + node.last_access


def _fifo(node: Node) -> int:
    return node.created


def _mru(node: Node) -> int:
    return -node.last_access


def _filo(node: Node) -> int:
    return -node.created


_PRIORITY: dict[EvictionPolicy, Callable[[Node], int]] = {
    EvictionPolicy.LRU: _lru,
    EvictionPolicy.LFU: _lfu,
    EvictionPolicy.FIFO: _fifo,
    EvictionPolicy.MRU: _mru,
    EvictionPolicy.FILO: _filo,
}
"""Eviction order keys, lowest evicted first (a plain function each: called per leaf change)."""


_NID_BITS = 40
_NID_MASK = (1 << _NID_BITS) - 1


class RadixTree:
    """The tree plus its size counters (in units): ``evictable_units`` (unlocked) and
    ``protected_units`` (locked by a running request)."""

    def __init__(self, policy: EvictionPolicy = EvictionPolicy.LRU) -> None:
        self.policy = policy
        self._priority = _PRIORITY[policy]
        self._clock = 0
        self._next_id = 0
        self.root = self._node([], None)
        self._lru = policy is EvictionPolicy.LRU
        self.root.lock_ref = 1
        self.evictable_units = 0
        self.protected_units = 0
        self._leaves: dict[int, Node] = {}
        self._heap: list[int] = []
        """Leaf entries ``priority << _NID_BITS | nid`` (ints compare faster than tuples;
        same order as ``(priority, nid)``), with stale ones skipped when popped."""

    def _node(self, key: Keys, parent: Node | None) -> Node:
        self._next_id += 1
        assert self._next_id <= _NID_MASK, "node ids overflow the eviction heap's encoding"
        return Node(key, parent, self._next_id, self._clock)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    @property
    def total_units(self) -> int:
        return self.evictable_units + self.protected_units

    # -- matching -----------------------------------------------------------------------

    def walk(self, keys: U64 | Keys, limit: int | None = None) -> Walk:
        """Longest prefix of ``keys`` (of its first ``limit`` keys) in the tree. Does not
        mutate."""
        keys = as_keys(keys)
        node = self.root
        pos = 0
        n = len(keys) if limit is None else min(limit, len(keys))
        steps: list[tuple[Node, int]] = []
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            k = child.size
            end = pos + k
            # Chained keys: equal first and last keys mean the whole run matches.
            if end > n or keys[end - 1] != child.key[-1]:
                k = keys_common_prefix(keys, pos, n, child.key)
            steps.append((child, k))
            pos += k
            if k < child.size:
                break
            node = child
        return Walk(steps, pos)

    def lock(self, walk: Walk, num_units: int) -> Node:
        """Lock the first ``num_units`` (<= ``walk.matched``) units of a walk; returns the
        node that ends there (the root for 0).

        Mutates: splits the node the prefix ends inside, refreshes access times along the
        path (as SGLang's ``match_prefix``) and adds one lock from that node to the root.
        The tree must not have changed since the walk.
        """
        now = self._tick()
        node = self.root
        node.last_access = now
        done = 0
        for step, k in walk.steps:
            if done >= num_units:
                break
            take = min(k, num_units - done)
            child = self._split(step, take) if take < step.size else step
            child.last_access = now
            done += take
            node = child
        self.inc_lock(node)
        return node

    def _split(self, child: Node, k: int) -> Node:
        """Split ``child`` after its first ``k`` units; returns the new upper node."""
        parent = child.parent
        assert parent is not None
        upper = self._node(child.key[:k], parent)
        upper.lock_ref = child.lock_ref
        upper.hit_count = child.hit_count
        parent.children[child.key[0]] = upper
        child.key = child.key[k:]
        child.size -= k
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    # -- insertion ----------------------------------------------------------------------

    def insert(
        self, node: Node, keys: U64 | Keys, start: int = 0, lock_from: Node | None = None
    ) -> tuple[Node, int]:
        """Insert ``keys`` below ``node`` (``keys[0]`` is the unit after ``node``'s run).

        Mutates: splits where the keys leave a stored run, adds one leaf for the rest
        (a copy of the keys), refreshes access times and, for LFU, hit counts along the
        existing path. Returns the node ending at the last key and how many of ``keys``
        were already present. ``start``: insert ``keys[start:]`` instead. ``lock_from``
        (``node`` or an ancestor, already locked): also lock the nodes from the end up to
        it, as ``inc_lock(end, lock_from)``.
        """
        keys = as_keys(keys)
        now = self._tick()
        node.last_access = now
        pos = start
        n = len(keys)
        lfu = self.policy is EvictionPolicy.LFU
        leaves = self._leaves
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            k = child.size
            end = pos + k
            if end > n or keys[end - 1] != child.key[-1]:  # else the whole run matches
                k = keys_common_prefix(keys, pos, n, child.key)
                if k < child.size:
                    child = self._split(child, k)
            child.last_access = now
            if lfu:
                child.hit_count += 1
            if child.children:  # _refresh, inlined: an inner node is never an indexed leaf
                leaves.pop(child.nid, None)
            else:
                self._refresh(child)
            pos += k
            node = child
        present = pos - start
        if pos < n:
            leaf = self._node(keys[pos:], node)
            node.children[keys[pos]] = leaf
            self.evictable_units += n - pos
            leaves.pop(node.nid, None)  # _refresh(node): it now has a child
            node = leaf
            if lock_from is None:
                self._refresh(leaf)
        if lock_from is not None:
            self.inc_lock(node, lock_from)  # the new leaf is locked: never indexed
        return node, present

    # -- locks ----------------------------------------------------------------------------

    def inc_lock(self, node: Node, stop: Node | None = None) -> None:
        """Mutates: one more lock on ``node`` and its ancestors, up to (not including)
        ``stop`` (default: the root). ``stop`` must be ``node`` or one of its ancestors."""
        end = self.root if stop is None else stop
        while node is not end:
            if node.lock_ref == 0:
                n = node.size
                self.evictable_units -= n
                self.protected_units += n
                self._leaves.pop(node.nid, None)
            node.lock_ref += 1
            parent = node.parent
            assert parent is not None
            node = parent

    def dec_lock(self, node: Node) -> None:
        """Mutates: one lock less on ``node`` and its ancestors; unlocked leaves become
        evictable."""
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                n = node.size
                self.evictable_units += n
                self.protected_units -= n
                if not node.children:
                    self._refresh(node)
            parent = node.parent
            assert parent is not None
            node = parent

    # -- eviction -------------------------------------------------------------------------

    def _refresh(self, node: Node) -> None:
        """Keep the evictable-leaf index right for ``node`` after a change."""
        if node.lock_ref == 0 and not node.children and node is not self.root:
            self._leaves[node.nid] = node
            prio = node.last_access if self._lru else self._priority(node)
            heapq.heappush(self._heap, prio << _NID_BITS | node.nid)
            if len(self._heap) > 4 * len(self._leaves) + 64:
                self._heap = [self._priority(x) << _NID_BITS | x.nid for x in self._leaves.values()]
                heapq.heapify(self._heap)
        else:
            self._leaves.pop(node.nid, None)

    def evict(self, num_units: int) -> tuple[int, int]:
        """Mutates: remove unlocked leaves in policy order (whole runs, parents that become
        leaves join the queue) until at least ``num_units`` are gone or none is left.
        Returns (units evicted, nodes evicted)."""
        leaves = self._leaves
        priority = self._priority
        lru = self._lru
        evicted = 0
        nodes = 0
        heappop = heapq.heappop
        while evicted < num_units and self._heap:  # _refresh may rebuild the heap
            entry = heappop(self._heap)
            node = leaves.get(entry & _NID_MASK)
            if node is None or entry >> _NID_BITS != (node.last_access if lru else priority(node)):
                continue  # stale entry
            nid = node.nid
            del leaves[nid]
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[0]]
            node.parent = None
            n = node.size
            self.evictable_units -= n
            evicted += n
            nodes += 1
            if parent.children:  # _refresh(parent), inlined for an inner node
                leaves.pop(parent.nid, None)
            else:
                self._refresh(parent)
        return evicted, nodes

    # -- checks ---------------------------------------------------------------------------

    def check_invariants(self) -> dict[int, int]:
        """Raise ``InvariantViolation`` on an inconsistent tree; returns lock counts by node id."""
        evictable = protected = 0
        locks: dict[int, int] = {}
        stack = [self.root]
        while stack:
            node = stack.pop()
            locks[node.nid] = node.lock_ref
            for first, child in node.children.items():
                check(child.parent is node, f"node {child.nid}: wrong parent")
                check(
                    child.size == len(child.key) > 0, f"node {child.nid}: empty run or size drift"
                )
                check(child.key[0] == first, f"node {child.nid}: wrong child key")
                check(
                    child.lock_ref <= node.lock_ref or node is self.root,
                    "child locked more than parent",
                )
                stack.append(child)
            if node is self.root:
                continue
            if node.lock_ref:
                protected += node.size
            else:
                evictable += node.size
            is_leaf = node.lock_ref == 0 and not node.children
            check(is_leaf == (node.nid in self._leaves), f"node {node.nid}: leaf index wrong")
        check(evictable == self.evictable_units, "evictable units drifted")
        check(protected == self.protected_units, "protected units drifted")
        check(all(x.parent is not None for x in self._leaves.values()), "evicted node indexed")
        return locks
