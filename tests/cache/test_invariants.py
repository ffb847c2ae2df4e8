"""One property suite for every registered prefix-cache model (and a few settings of each).

Random pin / unpin / match / insert / evict sequences over prompts that share prefixes
(a 3-letter alphabet) must never break the model's own invariants, never let a usage
figure go negative or the pool overflow (free + cached + pinned == capacity), never evict
pinned data, never report a hit longer than the prompt minus one token or longer than
the longest prefix any earlier sequence had (except with llama.cpp's ``--cache-reuse``,
which reuses shifted chunks), and ``match``/``usage`` must not mutate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvroute.cache.base import AdmitStatus, CacheGeometry, CacheSeq, PrefixCache
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy, SglangConfig
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay.seq import SeqBuilder, SeqPair
from kvroute.trace.records import BlockPrompt, Request, TokenPrompt

SETTINGS = {
    "defaults": EngineSettings(),
    "small-units": EngineSettings(
        vllm=VllmConfig(block_size_tokens=4, max_num_seqs=3),
        sglang=SglangConfig(page_size=4, max_running_requests=3),
        llamacpp=LlamaCppConfig(num_slots=2, kv_unified=False, cache_ram_mib=-1, cache_reuse=2),
    ),
    "other-policies": EngineSettings(
        sglang=SglangConfig(eviction_policy=EvictionPolicy.LFU, schedule_policy=SchedulePolicy.LPM),
        llamacpp=LlamaCppConfig(num_slots=3, cache_ram_mib=0, slot_prompt_similarity=0.0),
    ),
    "mru-fifo": EngineSettings(
        sglang=SglangConfig(eviction_policy=EvictionPolicy.MRU),
        llamacpp=LlamaCppConfig(cache_idle_slots=False, cache_prompt=False),
    ),
}

CASES = [
    (name, label)
    for label, engine_settings in SETTINGS.items()
    for name in cache_models(engine_settings).names()
]


@st.composite
def prompt_sets(draw: st.DrawFn) -> list[list[int]]:
    """Prompts that share prefixes of a common base, as real traffic does."""
    base = draw(st.lists(st.integers(0, 2), max_size=48))
    out = []
    for _ in range(draw(st.integers(1, 8))):
        k = draw(st.integers(0, len(base)))
        out.append(base[:k] + draw(st.lists(st.integers(0, 2), max_size=12)))
    return out


ops = st.lists(
    st.one_of(
        st.tuples(st.just("pin"), st.integers(0, 7), st.integers(0, 12), st.booleans()),
        st.tuples(st.just("unpin"), st.integers(0, 50)),
        st.tuples(st.just("match"), st.integers(0, 7)),
        st.tuples(st.just("insert"), st.integers(0, 7)),
        st.tuples(st.just("evict"), st.integers(0, 40)),
        st.tuples(st.just("order"), st.integers(0, 7), st.integers(0, 7)),
    ),
    max_size=60,
)


@dataclass
class _Oracle:
    """Every token sequence any request could have left behind (prompts and finals)."""

    seen: list[list[int]]

    def longest(self, prompt: list[int]) -> int:
        best = 0
        for s in self.seen:
            n = 0
            for a, b in zip(s, prompt, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best


def _pair(model: PrefixCache, prompt: list[int], out: int, rid: int, block: int | None) -> SeqPair:
    if block is None:
        req = Request(prompt=TokenPrompt(np.array(prompt, dtype=np.uint32)), output_len=out)
    else:
        n_units = -(-len(prompt) // block)
        ids = np.array(
            [1 + sum(prompt[: (i + 1) * block]) * 7 + i for i in range(n_units)], dtype=np.uint64
        )
        req = Request(prompt=BlockPrompt(ids, block, len(prompt)), output_len=out)
    builder = SeqBuilder(
        model.unit_tokens,
        block_size_tokens=block,
        keep_token_ids=model.needs_token_ids and block is None,
    )
    return builder.build([req], [rid], [out])[0]


def _usage_ok(model: PrefixCache) -> None:
    u = model.usage()
    assert u.cached_tokens >= 0 and u.pinned_tokens >= 0 and u.host_cached_tokens >= 0
    if u.capacity_tokens is not None:
        assert u.free_tokens is not None and u.free_tokens >= 0
        assert u.free_tokens + u.cached_tokens + u.pinned_tokens == u.capacity_tokens


def _run(
    model: PrefixCache,
    prompts: list[list[int]],
    script: list[tuple[object, ...]],
    block: int | None,
) -> None:
    running: dict[int, tuple[SeqPair, list[int]]] = {}
    oracle = _Oracle([])
    next_id = 0
    for op in script:
        kind = op[0]
        if kind == "pin":
            _, i, out, _known = op
            assert isinstance(i, int) and isinstance(out, int)
            prompt = prompts[i % len(prompts)]
            pair = _pair(model, prompt, out, next_id, block)
            pinned_before = model.usage().pinned_tokens
            adm = model.pin(next_id, pair.prompt, pair.final.num_tokens)
            event(f"pin: {adm.status.value}{' with a hit' if adm.cached_tokens else ''}")
            if adm.status is AdmitStatus.ADMITTED:
                assert 0 <= adm.cached_tokens <= max(len(prompt) - 1, 0)
                if block is None and not model.needs_token_ids:  # --cache-reuse shifts chunks
                    assert adm.cached_tokens <= oracle.longest(prompt)
                running[next_id] = (pair, prompt)
                oracle.seen.append(prompt)
            else:
                assert model.usage().pinned_tokens == pinned_before
            next_id += 1
        elif kind == "unpin" and running:
            _, k = op
            assert isinstance(k, int)
            rid = sorted(running)[k % len(running)]
            pair, _prompt = running.pop(rid)
            model.unpin(rid, pair.final)
        elif kind == "match":
            _, i = op
            assert isinstance(i, int)
            prompt = prompts[i % len(prompts)]
            pair = _pair(model, prompt, 0, 10_000 + i, block)
            before = (model.usage(), model.stats())
            hit = model.match(pair.prompt)
            assert (model.usage(), model.stats()) == before
            assert 0 <= hit <= max(len(prompt) - 1, 0)
            if block is None and not model.needs_token_ids:
                assert hit <= oracle.longest(prompt)
        elif kind == "insert":
            _, i = op
            assert isinstance(i, int)
            prompt = prompts[i % len(prompts)]
            pair = _pair(model, prompt, 0, 20_000 + i, block)
            hit = model.insert(pair.prompt)
            assert 0 <= hit <= max(len(prompt) - 1, 0)
            oracle.seen.append(prompt)
        elif kind == "evict":
            _, n = op
            assert isinstance(n, int)
            pinned = model.usage().pinned_tokens
            cached = model.usage().cached_tokens
            evicted = model.evict(n)
            event("evict: dropped data" if evicted else "evict: nothing")
            assert evicted >= 0
            assert model.usage().pinned_tokens == pinned  # never pinned data
            assert model.usage().cached_tokens <= cached
        elif kind == "order":
            _, i, j = op
            assert isinstance(i, int) and isinstance(j, int)
            seqs: list[CacheSeq] = [
                _pair(model, prompts[x % len(prompts)], 0, 30_000 + x, block).prompt
                for x in (i, j, i)
            ]
            before = (model.usage(), model.stats())
            order = list(model.schedule_order(seqs, num_released=j % 4))
            assert sorted(order) == [0, 1, 2]
            assert (model.usage(), model.stats()) == before
        model.check_invariants()
        _usage_ok(model)
    for rid in sorted(running):
        model.unpin(rid, running[rid][0].final)
        model.check_invariants()
    assert model.usage().pinned_tokens == 0 and model.usage().num_running == 0
    model.evict(1 << 30)
    model.check_invariants()
    assert model.usage().cached_tokens == 0


@pytest.mark.parametrize(("engine", "label"), CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=prompt_sets(),
    script=ops,
    capacity=st.sampled_from([None, 24, 40, 96]),
)
def test_token_prompts(
    engine: str,
    label: str,
    prompts: list[list[int]],
    script: list[tuple[object, ...]],
    capacity: int | None,
) -> None:
    model = cache_models(SETTINGS[label]).get(engine)(CacheGeometry(capacity, None, 64))
    _run(model, prompts, script, None)


@pytest.mark.parametrize(("engine", "label"), CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=prompt_sets(),
    script=ops,
    capacity=st.sampled_from([None, 16, 40, 96]),
)
def test_hash_only_prompts(
    engine: str,
    label: str,
    prompts: list[list[int]],
    script: list[tuple[object, ...]],
    capacity: int | None,
) -> None:
    model = cache_models(SETTINGS[label]).get(engine)(CacheGeometry(capacity, 4, 64))
    _run(model, prompts, script, 4)


def test_every_registered_model_is_covered() -> None:
    assert {name for name, _ in CASES} == set(cache_models().names())
    assert set(cache_models().names()) == {"llamacpp", "vllm", "sglang"}
