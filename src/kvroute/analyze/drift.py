"""Prompt drift: when a frequent shared prefix (a system prompt, a tool schema) is
replaced by a new version, when that happened and what it cost.

The trace is cut into consecutive windows of ``window_requests`` requests. In each,
a *head* is the deepest block of a frequent leading prefix: a chained block hash that
at least ``min_share`` of the window's requests (and more than one session) carry, none
of whose child blocks is that frequent. Chained hashes make a head stand for its whole
prefix. A **version change** is a head of one window that is gone in the next (neither
it nor a deeper or shallower form of it is a head any more) while a head that was not
a head before it appeared takes its place; old and new are paired by the longest
common leading prefix. Example, 512-token blocks kept, the rest rewritten::

    before   [ A0 A1 ... A31 | B32 ... B63 ]   head B63: 64 blocks, 70 % of requests
    after    [ A0 A1 ... A31 | C32 ... C64 ]   head C64: 65 blocks, 70 % of requests
    common_prefix_tokens = 32 blocks; changed_tokens = old 64 blocks - 32 common

Cost, in the trace's own terms: ``changed_tokens`` must be prefilled again once per
cache copy (each replica, each llama.cpp slot); ``hit_ratio_before``/``_after`` are the
trace's ideal prefix overlap (as in ``overlap``) over the window before the change and
the window that holds it. A prefix that changes more often than a head can form (a
timestamp in every prompt) is not a version: it never becomes frequent.

Memory: the current window's block hashes (capped at ``max_depth_blocks`` per prompt)
and a few heads per window.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvroute.types import BlockHashes


@dataclass(frozen=True, slots=True)
class PrefixChange:
    at_request: int
    """Index (0-based, trace order) of the first request with the new version."""
    at_s: float | None
    """Its arrival time on the trace's clock; None when the trace has no times."""
    at_offset_s: float | None
    """Seconds from the trace's first arrival."""
    old_prefix_tokens: int
    new_prefix_tokens: int
    common_prefix_tokens: int
    """Leading tokens both versions share (block aligned)."""
    changed_tokens: int
    """Old prefix minus the common part: what each cache copy prefills again."""
    share_before: float
    """The old version's share of requests in the windows before the one holding the
    change (where both versions mix)."""
    share_after: float
    """The new version's share of requests in the windows after it, to the end."""
    num_requests_old: int
    num_requests_new: int
    hit_ratio_before: float
    hit_ratio_after: float
    preview_old: str | None
    preview_new: str | None
    """Decoded text of the first differing block (token traces, text allowed)."""


@dataclass(frozen=True, slots=True)
class DriftResult:
    window_requests: int
    min_share: float
    num_windows: int
    changes: list[PrefixChange]


@dataclass(slots=True)
class _Head:
    key: int
    chain: list[int]
    """Its prefix's block hashes, root first (``chain[-1] == key``)."""
    first_window: int
    first_request: int
    first_t: float
    last_window: int
    counts: dict[int, int] = field(default_factory=dict)
    """Requests carrying it per window it was a head in."""

    @property
    def num_blocks(self) -> int:
        return len(self.chain)


@dataclass(frozen=True, slots=True)
class _Window:
    start: int
    num_requests: int
    num_tokens: int
    matched_tokens: int

    @property
    def hit_ratio(self) -> float:
        return self.matched_tokens / self.num_tokens if self.num_tokens else 0.0


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class DriftTracker:
    """Feed every request in trace order (:meth:`add`), then :meth:`finish`."""

    def __init__(
        self,
        block_size_tokens: int,
        *,
        window_requests: int = 200,
        min_share: float = 0.1,
        max_depth_blocks: int = 1024,
    ) -> None:
        self.block_size_tokens = block_size_tokens
        self.window_requests = window_requests
        self.min_share = min_share
        self.max_depth_blocks = max_depth_blocks
        self._keys: list[BlockHashes] = []
        self._arrival: list[float] = []
        self._session: list[str | None] = []
        self._num_tokens = 0
        self._matched = 0
        self._num_requests = 0
        self._first_t = math.nan
        self._windows: list[_Window] = []
        self._heads: dict[int, _Head] = {}
        self._prev: set[int] = set()
        self._pairs: list[tuple[_Head, _Head]] = []

    def add(
        self,
        block_hashes: BlockHashes,
        num_tokens: int,
        matched_tokens: int,
        arrival_s: float | None,
        session_id: str | None,
    ) -> None:
        """One request: its chained block hashes (full blocks and a partial last one
        alike), length, ideal matched prefix (from the prefix index) and arrival."""
        self._keys.append(block_hashes[: self.max_depth_blocks])
        t = math.nan if arrival_s is None else arrival_s
        if math.isnan(self._first_t):
            self._first_t = t
        self._arrival.append(t)
        self._session.append(session_id)
        self._num_tokens += num_tokens
        self._matched += matched_tokens
        self._num_requests += 1
        if len(self._keys) >= self.window_requests:
            self._close()

    def _close(self) -> None:
        n = len(self._keys)
        start = self._num_requests - n
        w = len(self._windows)
        self._windows.append(_Window(start, n, self._num_tokens, self._matched))
        heads = self._window_heads(w, start)
        self._keys, self._arrival, self._session = [], [], []
        self._num_tokens = self._matched = 0
        self._pair(w, heads)
        self._prev = heads

    def _window_heads(self, w: int, start: int) -> set[int]:
        """Find this window's heads; record them. Returns their keys."""
        lengths = np.array([k.shape[0] for k in self._keys], dtype=np.int64)
        if not lengths.sum():
            return set()
        flat = np.concatenate(self._keys)
        req = np.repeat(np.arange(lengths.shape[0]), lengths)
        depth = np.arange(flat.shape[0]) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        # Frequent keys from a plain sort (no inverse: a few frequent keys need positions).
        ordered = np.sort(flat)
        run_starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        run_lens = np.diff(np.append(run_starts, ordered.shape[0]))
        threshold = max(2, math.ceil(self.min_share * lengths.shape[0]))
        frequent_keys = ordered[run_starts[run_lens >= threshold]]
        if not frequent_keys.shape[0]:
            return set()
        slot = np.minimum(np.searchsorted(frequent_keys, flat), frequent_keys.shape[0] - 1)
        is_frequent = frequent_keys[slot] == flat
        child_pos = np.flatnonzero(is_frequent & (depth > 0))
        with_frequent_child = set(flat[child_pos - 1].tolist())
        found: set[int] = set()
        for key in frequent_keys.tolist():
            if key in with_frequent_child:
                continue
            positions = np.flatnonzero(flat == np.uint64(key))
            requests = req[positions]
            sessions = [self._session[r] for r in requests.tolist()]
            if len({s for s in sessions if s is not None}) + sessions.count(None) < 2:
                continue  # one session's own history, not a shared prefix
            p0 = int(positions[0])
            head = self._heads.get(key)
            if head is None:
                times = np.array([self._arrival[r] for r in requests.tolist()])
                head = self._heads[key] = _Head(
                    key=key,
                    chain=flat[p0 - int(depth[p0]) : p0 + 1].tolist(),
                    first_window=w,
                    first_request=start + int(requests[0]),
                    first_t=float(np.nanmin(times)) if not np.isnan(times).all() else math.nan,
                    last_window=w,
                )
            head.last_window = w
            head.counts[w] = int(positions.shape[0])
            found.add(key)
        return found

    def _pair(self, w: int, heads: set[int]) -> None:
        """Pair heads that left with heads that arrived (see the module docstring)."""
        cur = [self._heads[k] for k in heads]
        taken = {new.key for _, new in self._pairs}
        for key in self._prev - heads:
            old = self._heads[key]
            if any(old.key in h.chain or h.key in old.chain for h in cur):
                continue  # the same prefix, shared deeper or shallower now
            fresh = [
                h
                for h in cur
                if h.first_window > old.first_window
                and h.first_window >= w - 1
                and h.key not in taken
                and old.key not in h.chain
            ]
            if not fresh:
                continue
            new = max(fresh, key=lambda h: (_common(old.chain, h.chain), h.counts.get(w, 0)))
            self._pairs.append((old, new))
            taken.add(new.key)

    def _share(self, head: _Head, windows: list[int]) -> float:
        num = sum(self._windows[w].num_requests for w in windows)
        return sum(head.counts.get(w, 0) for w in windows) / num if num else 0.0

    def finish(self, preview: Callable[[list[int]], str | None] | None = None) -> DriftResult:
        """The changes found. A last partial window counts when it holds at least half
        a window of requests. ``preview`` decodes block hashes to text (or None)."""
        if len(self._keys) >= max(1, self.window_requests // 2):
            self._close()
        bs = self.block_size_tokens
        changes: list[PrefixChange] = []
        for old, new in self._pairs:
            common = _common(old.chain, new.chain)
            at = new.first_request
            w_at = min(at // self.window_requests, len(self._windows) - 1)
            before = self._windows[max(w_at - 1, 0)]
            # Shares away from the window holding the change, where both versions mix.
            before_ws = [w for w in old.counts if w < w_at] or list(old.counts)
            after_ws = list(range(w_at + 1, len(self._windows))) or [w_at]
            share_before = self._share(old, before_ws)
            share_after = self._share(new, after_ws)
            at_s = None if math.isnan(new.first_t) else new.first_t
            changes.append(
                PrefixChange(
                    at_request=at,
                    at_s=at_s,
                    at_offset_s=None if at_s is None else at_s - self._first_t,
                    old_prefix_tokens=old.num_blocks * bs,
                    new_prefix_tokens=new.num_blocks * bs,
                    common_prefix_tokens=common * bs,
                    changed_tokens=(old.num_blocks - common) * bs,
                    share_before=share_before,
                    share_after=share_after,
                    num_requests_old=sum(old.counts.values()),
                    num_requests_new=sum(new.counts.values()),
                    hit_ratio_before=before.hit_ratio,
                    hit_ratio_after=self._windows[w_at].hit_ratio,
                    preview_old=_preview(preview, old.chain, common),
                    preview_new=_preview(preview, new.chain, common),
                )
            )
        changes.sort(key=lambda c: c.at_request)
        return DriftResult(self.window_requests, self.min_share, len(self._windows), changes)


def _preview(
    preview: Callable[[list[int]], str | None] | None, chain: list[int], common: int
) -> str | None:
    if preview is None or common >= len(chain):
        return None
    return preview([chain[common]])
