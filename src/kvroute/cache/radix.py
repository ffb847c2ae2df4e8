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
from dataclasses import dataclass

import numpy as np

from kvroute.cache.base import U64, check, common_prefix_len


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

    def __init__(self, key: U64, parent: Node | None, nid: int, now: int) -> None:
        self.key = key
        self.size = int(key.shape[0])
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.lock_ref = 0
        self.last_access = now
        self.created = now
        self.hit_count = 0
        self.nid = nid


@dataclass(frozen=True, slots=True)
class Walk:
    """A read-only match: the nodes passed (with how many of their units matched) and the
    matched length. Only the last step may be partial."""

    steps: list[tuple[Node, int]]
    matched: int


_EMPTY = np.empty(0, dtype=np.uint64)


class RadixTree:
    """The tree plus its size counters (in units): ``evictable_units`` (unlocked) and
    ``protected_units`` (locked by a running request)."""

    def __init__(self, policy: EvictionPolicy = EvictionPolicy.LRU) -> None:
        self.policy = policy
        self._clock = 0
        self._next_id = 0
        self.root = self._node(_EMPTY, None)
        self.root.lock_ref = 1
        self.evictable_units = 0
        self.protected_units = 0
        self._leaves: dict[int, Node] = {}
        self._heap: list[tuple[int, int, Node]] = []

    def _node(self, key: U64, parent: Node | None) -> Node:
        self._next_id += 1
        return Node(key, parent, self._next_id, self._clock)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    @property
    def total_units(self) -> int:
        return self.evictable_units + self.protected_units

    # -- matching -----------------------------------------------------------------------

    def walk(self, keys: U64) -> Walk:
        """Longest prefix of ``keys`` in the tree. Does not mutate."""
        node = self.root
        pos = 0
        n = keys.shape[0]
        steps: list[tuple[Node, int]] = []
        while pos < n:
            child = node.children.get(int(keys[pos]))
            if child is None:
                break
            k = common_prefix_len(child.key, keys[pos:])
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
        parent.children[int(child.key[0])] = upper
        child.key = child.key[k:]
        child.size -= k
        child.parent = upper
        upper.children[int(child.key[0])] = child
        return upper

    # -- insertion ----------------------------------------------------------------------

    def insert(self, node: Node, keys: U64) -> tuple[Node, int]:
        """Insert ``keys`` below ``node`` (``keys[0]`` is the unit after ``node``'s run).

        Mutates: splits where the keys leave a stored run, adds one leaf for the rest
        (a copy of the keys), refreshes access times and, for LFU, hit counts along the
        existing path. Returns the node ending at the last key and how many of ``keys``
        were already present.
        """
        now = self._tick()
        node.last_access = now
        pos = 0
        n = keys.shape[0]
        lfu = self.policy is EvictionPolicy.LFU
        while pos < n:
            child = node.children.get(int(keys[pos]))
            if child is None:
                break
            k = common_prefix_len(child.key, keys[pos:])
            if k < child.size:
                child = self._split(child, k)
            child.last_access = now
            if lfu:
                child.hit_count += 1
            self._refresh(child)
            pos += k
            node = child
        present = pos
        if pos < n:
            leaf = self._node(keys[pos:].copy(), node)
            node.children[int(keys[pos])] = leaf
            self.evictable_units += n - pos
            self._refresh(node)
            self._refresh(leaf)
            node = leaf
        return node, present

    # -- locks ----------------------------------------------------------------------------

    def inc_lock(self, node: Node) -> None:
        """Mutates: one more lock on ``node`` and its ancestors."""
        while node is not self.root:
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

    def _priority(self, node: Node) -> int:
        """Eviction order key, lowest first (LFU packs hit count above access time)."""
        p = self.policy
        if p is EvictionPolicy.LRU:
            return node.last_access
        if p is EvictionPolicy.LFU:
            return (node.hit_count << 48) + node.last_access
        if p is EvictionPolicy.FIFO:
            return node.created
        if p is EvictionPolicy.MRU:
            return -node.last_access
        return -node.created

    def _refresh(self, node: Node) -> None:
        """Keep the evictable-leaf index right for ``node`` after a change."""
        if node.lock_ref == 0 and not node.children and node is not self.root:
            self._leaves[node.nid] = node
            heapq.heappush(self._heap, (self._priority(node), node.nid, node))
            if len(self._heap) > 4 * len(self._leaves) + 64:
                self._heap = [(self._priority(x), x.nid, x) for x in self._leaves.values()]
                heapq.heapify(self._heap)
        else:
            self._leaves.pop(node.nid, None)

    def evict(self, num_units: int) -> tuple[int, int]:
        """Mutates: remove unlocked leaves in policy order (whole runs, parents that become
        leaves join the queue) until at least ``num_units`` are gone or none is left.
        Returns (units evicted, nodes evicted)."""
        heap, leaves = self._heap, self._leaves
        evicted = 0
        nodes = 0
        while evicted < num_units and heap:
            prio, nid, node = heapq.heappop(heap)
            if leaves.get(nid) is not node or prio != self._priority(node):
                continue  # stale entry
            del leaves[nid]
            parent = node.parent
            assert parent is not None
            del parent.children[int(node.key[0])]
            node.parent = None
            n = node.size
            self.evictable_units -= n
            evicted += n
            nodes += 1
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
                check(int(child.key[0]) == first, f"node {child.nid}: wrong child key")
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
