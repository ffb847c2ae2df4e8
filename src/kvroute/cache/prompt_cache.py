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

Speed, same results: a state that shares no first unit with a prompt has LCP 0 and can
neither contain it, be contained in it nor be loaded for it, so each operation only looks
at the states with the same first key (kept per first key, in cache order). Containment
is one key comparison, because keys are chained.
"""

from __future__ import annotations

import enum

from kvroute.cache.base import U64, CacheSeq, common_prefix_len
from kvroute.types import TokenIds

MIN_KEEP = 0.25


class SavedPrompt:
    """A slot's KV content: keys of its units, its length, and raw tokens when known.
    Read-only by convention; compared by identity. (A plain class: one is built per
    finished request, and the compiled build runs a dataclass's ``__init__`` interpreted.)"""

    __slots__ = ("keys", "num_tokens", "token_ids", "unit_tokens")

    def __init__(
        self, keys: U64, num_tokens: int, unit_tokens: int, token_ids: TokenIds | None = None
    ) -> None:
        self.keys = keys
        self.num_tokens = num_tokens
        self.unit_tokens = unit_tokens
        self.token_ids = token_ids

    def lcp_tokens(self, keys: U64, num_tokens: int) -> int:
        """Tokens shared with a sequence given by its keys and length."""
        m = common_prefix_len(self.keys, keys)
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
        return bool(self.keys[k - 1] == other.keys[k - 1])


class SaveResult(enum.Enum):
    SAVED = "saved"
    EMPTY = "empty"
    CONTAINED = "contained"
    """A saved state already holds the whole prompt."""
    TOO_LARGE = "too_large"


class HostPromptCache:
    """Saved prompts, oldest first, within ``limit_tokens`` (``None``: no limit)."""

    def __init__(self, limit_tokens: int | None) -> None:
        self.limit_tokens = limit_tokens
        self._order: dict[int, SavedPrompt] = {}
        """By ``id``, oldest first (dicts keep insertion order)."""
        self._by_first: dict[int, list[SavedPrompt]] = {}
        self.total_tokens = 0
        self.dropped_tokens = 0
        self.saved_tokens = 0
        self.loaded_tokens = 0

    def _group(self, keys: U64) -> list[SavedPrompt]:
        return self._by_first.get(int(keys[0]), []) if len(keys) else []

    @property
    def states(self) -> list[SavedPrompt]:
        """The saved states, oldest first."""
        return list(self._order.values())

    def _forget(self, gone: list[SavedPrompt]) -> None:
        for s in gone:
            del self._order[id(s)]
            self.total_tokens -= s.num_tokens
            if len(s.keys):
                first = int(s.keys[0])
                group = [x for x in self._by_first[first] if x is not s]
                if group:
                    self._by_first[first] = group
                else:
                    del self._by_first[first]

    def save(self, state: SavedPrompt) -> SaveResult:
        """Mutates: store ``state`` (kept by reference: the caller must not change its
        arrays). Drops the states it contains and the oldest ones to make room."""
        n = state.num_tokens
        if n == 0:
            return SaveResult.EMPTY
        group = self._group(state.keys)
        if any(s.contains(state) for s in group):
            return SaveResult.CONTAINED
        limit = self.limit_tokens
        if limit is not None and n > limit:
            return SaveResult.TOO_LARGE
        inside = [s for s in group if state.contains(s)]
        if inside:
            self._forget(inside)
        if limit is not None:
            self._shrink(limit - n)
        self._order[id(state)] = state
        if len(state.keys):
            self._by_first.setdefault(int(state.keys[0]), []).append(state)
        self.total_tokens += n
        self.saved_tokens += n
        return SaveResult.SAVED

    def choose(self, current: SavedPrompt | None, prompt: CacheSeq) -> SavedPrompt | None:
        """The state ``load`` would restore into a slot holding ``current``. No mutation."""
        total = prompt.num_tokens
        if total == 0:
            return None
        lcp = current.lcp_tokens(prompt.keys, total) if current is not None else 0
        has_current = current is not None and current.num_tokens > 0
        f_keep_best = lcp / current.num_tokens if current is not None and has_current else -1.0
        f_sim_best = lcp / total
        best = None
        for s in self._group(prompt.keys):
            cur = s.lcp_tokens(prompt.keys, total)
            f_keep = cur / s.num_tokens
            f_sim = cur / total
            if f_keep < MIN_KEEP:
                continue  # don't trash large prompts
            if f_keep_best < f_keep and f_sim_best < f_sim:
                f_keep_best, f_sim_best, best = f_keep, f_sim, s
        return best

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
        for s in self._order.values():
            if total <= budget:
                break
            total -= s.num_tokens
            gone.append(s)
        if gone:
            self.dropped_tokens += sum(s.num_tokens for s in gone)
            self._forget(gone)
