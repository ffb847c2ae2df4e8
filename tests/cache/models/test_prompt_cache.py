"""llama.cpp host prompt cache: containment, oldest-first limits, the f_keep/f_sim pick."""

from __future__ import annotations

from cache.cache_traces import pair
from kvroute.cache.models.prompt_cache import HostPromptCache, SavedPrompt, SaveResult


def saved(tokens: list[int]) -> SavedPrompt:
    seq = pair(1, tokens).prompt
    return SavedPrompt(seq.keys.copy(), seq.num_tokens, 1)


def test_save_skips_contained_and_drops_contained_states() -> None:
    c = HostPromptCache(None)
    assert c.save(saved([1, 2, 3, 4])) is SaveResult.SAVED
    assert c.save(saved([1, 2])) is SaveResult.CONTAINED
    assert c.save(saved([1, 2, 3, 4, 5, 6])) is SaveResult.SAVED  # replaces [1, 2, 3, 4]
    assert [s.num_tokens for s in c.states] == [6]
    assert c.save(saved([])) is SaveResult.EMPTY


def test_limit_drops_oldest_and_refuses_oversized() -> None:
    c = HostPromptCache(10)
    c.save(saved([1] * 4))
    c.save(saved([2] * 4))
    c.save(saved([3] * 4))  # 12 > 10: the oldest goes
    assert [int(s.num_tokens) for s in c.states] == [4, 4] and c.total_tokens == 8
    assert c.dropped_tokens == 4
    assert c.save(saved([4] * 11)) is SaveResult.TOO_LARGE


def test_load_needs_more_keep_and_more_similarity() -> None:
    c = HostPromptCache(None)
    long_state = saved(list(range(100)))
    c.save(long_state)
    prompt = pair(1, list(range(20)) + [999] * 5).prompt
    # f_keep = 20 / 100 < 0.25: a large prompt is not trashed for a small reuse.
    assert c.load(None, prompt) is None
    c.save(saved(list(range(20)) + [5] * 10))
    got = c.load(None, prompt)  # f_keep 20/30, f_sim 20/25
    assert got is not None and got.num_tokens == 30
    assert [s.num_tokens for s in c.states] == [100]
    # Keeping more of itself is not enough: it must also cover more of the prompt than
    # the slot's own content does.
    current = saved(list(range(24)))  # f_keep 20/24, f_sim 20/25
    assert c.save(saved([*list(range(20)), 7])) is SaveResult.SAVED  # f_keep 20/21, f_sim 20/25
    assert c.choose(current, prompt) is None
