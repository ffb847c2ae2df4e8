"""llama.cpp's host-memory prompt cache (``--cache-ram``): whole slot states, oldest first.

Follows ``server_prompt_cache`` in llama.cpp as vendored by llama-cpp-python 0.3.36
(``vendor/llama.cpp/tools/server/server-task.cpp``: ``alloc``, ``load``, ``update``;
``server-task.h``): a list of saved prompts. Saving skips a prompt some saved state
already contains, drops saved states the new one contains, and makes room by dropping the
oldest. Loading scans the states in order and takes one that keeps more of itself
(``f_keep``, at least 0.25) *and* covers more of the new prompt (``f_sim``) than the best
so far, starting from the slot's own content; a loaded state leaves the cache.

Sizes are in tokens: llama.cpp limits bytes (``--cache-ram`` MiB) and, through the token
limit ``n_ctx`` that the byte limit can only raise, the byte limit binds whenever it is
set. ``limit_tokens`` is therefore ``cache_ram / KV bytes per token``, or ``n_ctx`` for
``--cache-ram -1``.

Speed, same results: keys are chained, so a state shares at least ``j + 1`` units with a
prompt exactly when its key at position ``j`` equals the prompt's. The states are indexed
by their keys (every ``stride``-th position: each block of a hash-only trace, every 64th
token of a token trace), each entry in cache order, so an operation looks only at the
states that can matter:

- ``load`` scans in cache order for a state better than the best so far; the next one
  chosen is the first later state that beats it, and beating it needs a longer common
  prefix than the best's, so only the states holding the prompt's key at that depth are
  looked at (the many states sharing just a system prompt are passed over once one of
  them is the best);
- "some state contains the new one" looks at the states holding its last key;
- "the new one contains a state" looks up, per length of saved states, the state whose
  last key is the new one's key at that length.

A state that shares no first unit with a prompt has LCP 0 and can neither contain it, be
contained in it nor be loaded for it. Containment is one key comparison.
"""

from __future__ import annotations

import enum
import math

from kvroute.cache.base import U64, CacheSeq, keys_common_prefix
from kvroute.cache.models.shared import check
from kvroute.types import TokenIds

MIN_KEEP = 0.25
INDEX_TOKENS = 64
"""Index a state's key every this many tokens (every unit when units are larger)."""


class SavedPrompt:
    """A slot's KV content: keys of its units, its length, and raw tokens when known.
    Read-only by convention; compared by identity. (A plain class: one is built per
    finished request, and the compiled build runs a dataclass's ``__init__`` interpreted.)"""

    __slots__ = ("_key_list", "keys", "num_tokens", "seq", "token_ids", "unit_tokens")

    def __init__(
        self, keys: U64, num_tokens: int, unit_tokens: int, token_ids: TokenIds | None = None
    ) -> None:
        self.keys = keys
        self.num_tokens = num_tokens
        self.unit_tokens = unit_tokens
        self.token_ids = token_ids
        self.seq = -1
        """When it was last saved (the host cache's order); -1: never."""
        self._key_list: list[object] | None = None

    def key_list(self) -> list[object]:
        """``keys`` as Python ints, converted once (as :meth:`CacheSeq.key_list`)."""
        keys = self._key_list
        if keys is None:
            keys = self._key_list = self.keys.tolist()
        return keys

    def lcp_tokens(self, keys: list[object], num_tokens: int) -> int:
        """Tokens shared with a sequence given by its key list and length."""
        mine = self.key_list()
        m = keys_common_prefix(mine, 0, len(mine), keys)
        return min(m * self.unit_tokens, self.num_tokens, num_tokens)

    @property
    def fully_keyed(self) -> bool:
        return len(self.keys) * self.unit_tokens >= self.num_tokens

    def contains(self, other: SavedPrompt) -> bool:
        """Whether ``other``'s tokens are a prefix of this state's (LCP == other's length)."""
        k = len(other.keys)
        if other.num_tokens == 0:
            return True
        if not other.fully_keyed or k > len(self.keys) or other.num_tokens > self.num_tokens:
            return False
        return self.key_list()[k - 1] == other.key_list()[k - 1]


class SaveResult(enum.Enum):
    SAVED = "saved"
    EMPTY = "empty"
    CONTAINED = "contained"
    """A saved state already holds the whole prompt."""
    TOO_LARGE = "too_large"


_States = dict[SavedPrompt, None]
"""States in cache order, a dict as an ordered set (states hash by identity): one index
entry. Not a list: dropping a state from an entry is then one hash lookup, where a list's
``remove`` compares it with every state before it (on a trace whose prompts share a
first block, that entry holds most of the cache, and removals were most of a replay)."""

_NO_STATES: _States = {}
"""What an index lookup without states returns (never mutated)."""


class HostPromptCache:
    """Saved prompts, oldest first, within ``limit_tokens`` (``None``: no limit).

    ``unit_tokens`` (the units of the keys it will hold) sets how densely states are
    indexed; any value gives the same results."""

    def __init__(self, limit_tokens: int | None, unit_tokens: int = 1) -> None:
        self.limit_tokens = limit_tokens
        self._stride = max(1, INDEX_TOKENS // max(unit_tokens, 1))
        self._order: _States = {}
        """Oldest first."""
        self._holders: dict[object, _States] = {}
        """Key at an indexed position -> the states holding it there."""
        self._by_last: dict[object, _States] = {}
        """Last key -> the states ending with it."""
        self._num_of_length: list[int] = [0]
        """Index: a number of keys; value: how many states have that many."""
        self._next_seq = 0
        self.total_tokens = 0
        self.dropped_tokens = 0
        self.saved_tokens = 0
        self.loaded_tokens = 0

    @property
    def states(self) -> list[SavedPrompt]:
        """The saved states, oldest first."""
        return list(self._order)

    def check_invariants(self) -> None:
        """Raise :class:`~kvroute.cache.models.shared.InvariantViolation` if the size count
        drifted from the states or is over the limit. Slow: for tests."""
        check(
            self.total_tokens == sum(s.num_tokens for s in self.states), "host cache size drifted"
        )
        if self.limit_tokens is not None:
            check(self.total_tokens <= self.limit_tokens, "host cache over its limit")

    def _indexed(self, position: int) -> int:
        """The deepest indexed position at or before ``position``."""
        return position - position % self._stride

    def _holding(self, keys: list[object], position: int) -> _States:
        """States that may hold ``keys[position]`` at ``position``: a superset when ``position`` is not indexed (the deepest indexed one before it)."""
        j = self._indexed(position)
        group = self._holders.get(keys[j]) if j < len(keys) else None
        return _NO_STATES if group is None else group

    def _add(self, state: SavedPrompt) -> None:
        self._order[state] = None
        state.seq = self._next_seq
        self._next_seq += 1
        keys = state.key_list()
        k = len(keys)
        if k:
            holders = self._holders
            for j in range(0, k, self._stride):
                key = keys[j]
                group = holders.get(key)
                if group is None:
                    holders[key] = {state: None}
                else:
                    group[state] = None
            self._by_last.setdefault(keys[k - 1], {})[state] = None
        counts = self._num_of_length
        if k >= len(counts):
            counts.extend([0] * (k + 1 - len(counts)))
        counts[k] += 1
        self.total_tokens += state.num_tokens

    def _forget(self, gone: list[SavedPrompt]) -> None:
        holders, by_last = self._holders, self._by_last
        for s in gone:
            del self._order[s]
            self.total_tokens -= s.num_tokens
            keys = s.key_list()
            k = len(keys)
            if k:
                for j in range(0, k, self._stride):
                    _unlist(holders, keys[j], s)
                _unlist(by_last, keys[k - 1], s)
            self._num_of_length[k] -= 1

    def _contained_in_some(self, state: SavedPrompt) -> bool:
        k = len(state.keys)
        if not k or not state.fully_keyed:
            return False
        return any(s.contains(state) for s in self._holding(state.key_list(), k - 1))

    def _inside(self, state: SavedPrompt) -> list[SavedPrompt]:
        """The saved states ``state`` contains: per length of saved states up to its own,
        the states ending with its key at that length."""
        keys = state.key_list()
        counts, by_last = self._num_of_length, self._by_last
        found: list[SavedPrompt] = []
        for n in range(1, min(len(keys), len(counts) - 1) + 1):
            if counts[n]:
                group = by_last.get(keys[n - 1])
                if group is not None:
                    for s in group:
                        if len(s.keys) == n and state.contains(s):
                            found.append(s)
        return found

    def save(self, state: SavedPrompt) -> SaveResult:
        """Mutates: store ``state`` (kept by reference: the caller must not change its
        arrays). Drops the states it contains and the oldest ones to make room."""
        n = state.num_tokens
        if n == 0:
            return SaveResult.EMPTY
        if self._contained_in_some(state):
            return SaveResult.CONTAINED
        limit = self.limit_tokens
        if limit is not None and n > limit:
            return SaveResult.TOO_LARGE
        inside = self._inside(state)
        if inside:
            self._forget(inside)
        if limit is not None:
            self._shrink(limit - n)
        self._add(state)
        self.saved_tokens += n
        return SaveResult.SAVED

    def choose(self, current: SavedPrompt | None, prompt: CacheSeq) -> SavedPrompt | None:
        """The state ``load`` would restore into a slot holding ``current``: scanning the
        states oldest first, the last one that keeps more of itself (``f_keep``, at least
        ``MIN_KEEP``) and covers more of the prompt (``f_sim``) than the best before it,
        starting from ``current``. No mutation."""
        total = prompt.num_tokens
        keys = prompt.key_list()
        if total == 0 or not keys:
            return None
        lcp = current.lcp_tokens(keys, total) if current is not None else 0
        has_current = current is not None and current.num_tokens > 0
        f_keep_best = lcp / current.num_tokens if current is not None and has_current else -1.0
        f_sim_best = lcp / total
        best_tokens = lcp
        best = None
        after = -1
        unit = prompt.unit_tokens
        while True:
            # Beating the best needs more shared tokens than it has, so a longer common
            # prefix: at least best_tokens // unit + 1 units (key position best_tokens // unit).
            position = best_tokens // unit
            if best_tokens >= total or position >= len(keys):
                return best
            found = None
            for s in self._holding(keys, position):
                # Those before the best were passed over already (cache order).
                if s.seq <= after:
                    continue
                size = s.num_tokens
                # Shared tokens are at most the prompt and the state: a state too large to
                # keep enough of itself, or too small to beat the best, is passed over
                # without comparing keys (the same float comparisons bound the real ones).
                most = total / size
                if most < MIN_KEEP or most <= f_keep_best or size <= best_tokens:
                    continue
                # It must share more than the best and at least MIN_KEEP of itself: that
                # many units, which one key comparison tells (keys are chained).
                need = -(-max(best_tokens + 1, math.ceil(MIN_KEEP * size)) // unit)
                mine = s.key_list()
                if need > len(mine) or need > len(keys) or mine[need - 1] != keys[need - 1]:
                    continue
                cur = s.lcp_tokens(keys, total)
                f_keep = cur / s.num_tokens
                f_sim = cur / total
                if f_keep < MIN_KEEP:
                    continue  # don't trash large prompts
                if f_keep_best < f_keep and f_sim_best < f_sim:
                    found = s
                    f_keep_best, f_sim_best, best_tokens = f_keep, f_sim, cur
                    break
            if found is None:
                return best
            best = found
            after = found.seq

    def load(self, current: SavedPrompt | None, prompt: CacheSeq) -> SavedPrompt | None:
        """Mutates: take out and return the state to restore into a slot holding
        ``current`` for ``prompt``, or ``None`` to keep the slot as it is."""
        best = self.choose(current, prompt)
        if best is not None:
            self._forget([best])
            self.loaded_tokens += best.num_tokens
        return best

    def update(self) -> None:
        """Mutates: drop the oldest states until within the limit."""
        if self.limit_tokens is not None:
            self._shrink(self.limit_tokens)

    def _shrink(self, budget: int) -> None:
        total = self.total_tokens
        gone = []
        for s in self._order:
            if total <= budget:
                break
            total -= s.num_tokens
            gone.append(s)
        if gone:
            self.dropped_tokens += sum(s.num_tokens for s in gone)
            self._forget(gone)


def _unlist(index: dict[object, _States], key: object, state: SavedPrompt) -> None:
    """Take ``state`` out of ``index[key]`` (the key is dropped with its last state)."""
    group = index[key]
    if len(group) == 1:
        del index[key]
    else:
        del group[state]
