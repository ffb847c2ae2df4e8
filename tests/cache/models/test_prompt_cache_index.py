"""The indexed host prompt cache gives exactly what the plain scan of llama.cpp gives.

``ScanPromptCache`` is the specification: the cache as llama.cpp's ``server_prompt_cache``
walks it, every saved state in order, for every save and load (kvroute's model before it
was indexed). The indexed cache must pick the same state, keep the same states in the
same order and count the same tokens, on random operations and on whole replays.
"""

from __future__ import annotations

import numpy as np
import pytest

from cache.cache_traces import block_trace, token_trace
from kvroute.cache.base import U64, CacheGeometry, CacheSeq, common_prefix_len
from kvroute.cache.models import llamacpp as llamacpp_module
from kvroute.cache.models.llamacpp import LlamaCppConfig, LlamaCppPrefixCache
from kvroute.cache.models.prompt_cache import MIN_KEEP, HostPromptCache, SavedPrompt, SaveResult
from kvroute.cache.replay.loop import ReplayOutcome, replay
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.records import Request


class ScanPromptCache:
    """The reference: a list of states, oldest first, scanned whole by every operation."""

    def __init__(self, limit_tokens: int | None, unit_tokens: int = 1) -> None:
        del unit_tokens
        self.limit_tokens = limit_tokens
        self.order: list[SavedPrompt] = []
        self.total_tokens = self.dropped_tokens = self.saved_tokens = self.loaded_tokens = 0

    @property
    def states(self) -> list[SavedPrompt]:
        return list(self.order)

    def _forget(self, gone: list[SavedPrompt]) -> None:
        ids = {id(s) for s in gone}
        self.order = [s for s in self.order if id(s) not in ids]
        self.total_tokens -= sum(s.num_tokens for s in gone)

    def save(self, state: SavedPrompt) -> SaveResult:
        n = state.num_tokens
        if n == 0:
            return SaveResult.EMPTY
        if any(s.contains(state) for s in self.order):
            return SaveResult.CONTAINED
        if self.limit_tokens is not None and n > self.limit_tokens:
            return SaveResult.TOO_LARGE
        self._forget([s for s in self.order if state.contains(s)])
        if self.limit_tokens is not None:
            self._shrink(self.limit_tokens - n)
        self.order.append(state)
        self.total_tokens += n
        self.saved_tokens += n
        return SaveResult.SAVED

    def choose(self, current: SavedPrompt | None, prompt: CacheSeq) -> SavedPrompt | None:
        total = prompt.num_tokens
        if total == 0:
            return None
        lcp = current.lcp_tokens(prompt.key_list(), total) if current is not None else 0
        has = current is not None and current.num_tokens > 0
        keep_best = lcp / current.num_tokens if current is not None and has else -1.0
        sim_best = lcp / total
        best = None
        for s in self.order:
            cur = s.lcp_tokens(prompt.key_list(), total)
            keep, sim = cur / s.num_tokens, cur / total
            if keep >= MIN_KEEP and keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, s
        return best

    def load(self, current: SavedPrompt | None, prompt: CacheSeq) -> SavedPrompt | None:
        best = self.choose(current, prompt)
        if best is not None:
            self._forget([best])
            self.loaded_tokens += best.num_tokens
        return best

    def update(self) -> None:
        if self.limit_tokens is not None:
            self._shrink(self.limit_tokens)

    def _shrink(self, budget: int) -> None:
        gone = []
        total = self.total_tokens
        for s in self.order:
            if total <= budget:
                break
            total -= s.num_tokens
            gone.append(s)
        self.dropped_tokens += sum(s.num_tokens for s in gone)
        self._forget(gone)


def _tree_prompts(rng: np.random.Generator, count: int, unit: int) -> list[tuple[U64, int]]:
    """Prompts growing from a few roots by random extensions: many share a short prefix,
    a few a long one (chained keys, as the replay builds them)."""
    paths: list[list[int]] = [[int(rng.integers(0, 3))] for _ in range(3)]
    out = []
    for _ in range(count):
        base = paths[int(rng.integers(0, len(paths)))]
        cut = int(rng.integers(1, len(base) + 1))
        path = base[:cut] + [int(x) for x in rng.integers(0, 4, int(rng.integers(0, 6)))]
        paths.append(path)
        keys = chain_hashes(np.array(path, dtype=np.uint32), 1)
        # A partial last unit now and then: fewer tokens than the keyed units hold.
        tokens = len(path) * unit - (int(rng.integers(0, unit)) if rng.random() < 0.3 else 0)
        out.append((keys, max(tokens, 1)))
    return out


@pytest.mark.parametrize("unit", [1, 512])
@pytest.mark.parametrize("limit", [None, 40, 400])
def test_random_operations_match_the_scan(unit: int, limit: int | None) -> None:
    limit_tokens = None if limit is None else limit * unit
    for seed in range(4):
        rng = np.random.default_rng(seed)
        fast, ref = HostPromptCache(limit_tokens, unit), ScanPromptCache(limit_tokens)
        prompts = _tree_prompts(rng, 400, unit)
        held: list[SavedPrompt | None] = [None]
        for keys, tokens in prompts:
            op = rng.random()
            if op < 0.5:
                state = SavedPrompt(keys, tokens, unit)
                assert fast.save(state) is ref.save(state)
            else:
                seq = CacheSeq(keys, tokens, len(keys), unit)
                current = held[int(rng.integers(0, len(held)))]
                if op < 0.7:
                    assert fast.choose(current, seq) is ref.choose(current, seq)
                else:
                    got = fast.load(current, seq)
                    assert got is ref.load(current, seq)
                    if got is not None:
                        held.append(got)
                fast.update()
                ref.update()
            assert [id(s) for s in fast.states] == [id(s) for s in ref.states]
            assert fast.total_tokens == ref.total_tokens
        assert (fast.dropped_tokens, fast.saved_tokens, fast.loaded_tokens) == (
            ref.dropped_tokens,
            ref.saved_tokens,
            ref.loaded_tokens,
        )


def _replay(
    requests: list[Request], cap: int | None, block: int | None, config: LlamaCppConfig
) -> ReplayOutcome:
    t = TimingOptions()
    model = LlamaCppPrefixCache(config, CacheGeometry(cap, block, None))
    return replay(requests, model, plan(requests, t), t)


def _same(a: ReplayOutcome, b: ReplayOutcome) -> None:
    assert a.cached_tokens.tolist() == b.cached_tokens.tolist()
    assert a.admitted.tolist() == b.admitted.tolist()
    assert a.stats == b.stats
    assert a.final_usage == b.final_usage


@pytest.mark.parametrize(
    ("trace", "block", "caps"),
    [("block", 8, [64, 512, 4096, None]), ("token", None, [300, 2000, None])],
)
def test_llamacpp_replays_match_the_scan(
    trace: str, block: int | None, caps: list[int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole llama.cpp replays, host cache limited to n_ctx (the busiest case): every
    per-request hit, admission, counter and the final usage are equal."""
    requests = block_trace(600, seed=3, block=8) if trace == "block" else token_trace(400, seed=5)
    config = LlamaCppConfig(num_slots=2, cache_ram_mib=-1)
    for cap in caps:
        fast = _replay(requests, cap, block, config)
        with monkeypatch.context() as m:
            m.setattr(llamacpp_module, "HostPromptCache", ScanPromptCache)
            ref = _replay(requests, cap, block, config)
        _same(fast, ref)
        assert fast.stats.extra["ram_loaded_tokens"] > 0  # the cache was exercised


def test_common_prefix_reference_agrees() -> None:
    """The index relies on chained keys: sharing the key at position j means sharing
    j + 1 units, which is what common_prefix_len measures."""
    a = chain_hashes(np.array([1, 2, 3, 4], dtype=np.uint32), 1)
    b = chain_hashes(np.array([1, 2, 9, 4], dtype=np.uint32), 1)
    assert common_prefix_len(a, b) == 2 and a[3] != b[3]
