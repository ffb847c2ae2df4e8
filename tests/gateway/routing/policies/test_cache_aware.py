"""Cache-aware routing: the policy (pure), the per-backend cache views, the gateway
glue (header, stickiness) over fake upstreams, and engine-reported cache hits on real
llama-server replicas against round robin."""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, running_gateway
from kvroute.bench.workloads.base import GenContext
from kvroute.bench.workloads.multiturn import MultiturnWorkload
from kvroute.engines.state import EngineRecord
from kvroute.errors import InputError
from kvroute.gateway.cacheview.keys import SessionKeys, extends
from kvroute.gateway.cacheview.router import CacheRouter
from kvroute.gateway.cacheview.view import NO_DISPLACEMENT, BackendCacheView, Displacement
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.gateway.config.gateway import parse_config
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput
from kvroute.gateway.routing.policies.cache_aware import CacheAware, cache_aware
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.tokenizer import load_tokenizer


def snap(name: str, outstanding: int = 0, hit: int = 0) -> BackendSnapshot:
    return BackendSnapshot(name, 1.0, outstanding, hit)


def pick(prompt_tokens: int, sequence: int = 0) -> PickInput:
    return PickInput(rng=random.Random(0), sequence=sequence, prompt_tokens=prompt_tokens)


def test_policy_prefers_the_cheapest_expected_prefill() -> None:
    policy = CacheAware(min_hit_tokens=64, tokens_per_outstanding=256)
    backends = [snap("a", 1, 0), snap("b", 1, 900), snap("c", 0, 100)]
    # a: 1000 + 256, b: 100 + 256, c: 900
    assert policy.order(backends, pick(1000)) == [1, 2, 0]


def test_policy_sends_misses_to_the_least_loaded() -> None:
    policy = CacheAware(min_hit_tokens=64)
    backends = [snap("a", 3, 10), snap("b", 1, 63), snap("c", 2, 0)]
    assert policy.order(backends, pick(1000))[0] == 1
    assert policy.order(backends, pick(0))[0] == 1  # no prompt length: by load


def test_policy_bounds_load() -> None:
    policy = CacheAware(load_factor=1.5, tokens_per_outstanding=0)
    # b holds the whole prompt but would run 7 of 7: above 1.5 x the mean (3.5).
    backends = [snap("a", 0, 0), snap("b", 6, 4000)]
    assert policy.order(backends, pick(4000)) == [0, 1]


def slot_snap(
    name: str, outstanding: int, hit: int, displaced: int = 0, idle: int = 0
) -> BackendSnapshot:
    return BackendSnapshot(name, 1.0, outstanding, hit, displaced, idle, num_slots=2)


def test_policy_spares_the_slot_of_a_live_session() -> None:
    """A new session overwrites a slot wherever it goes: the one unused longest (most
    likely a finished session), or an empty one, rather than one used just now."""
    policy = CacheAware()
    fresh = slot_snap("fresh", 1, 0, displaced=600, idle=1)
    stale = slot_snap("stale", 1, 0, displaced=600, idle=40)
    empty = slot_snap("empty", 1, 0)
    assert policy.order([fresh, stale], pick(300, sequence=0))[0] == 1
    assert policy.order([stale, fresh], pick(300, sequence=1))[0] == 0
    assert policy.order([fresh, stale, empty], pick(300))[0] == 2
    # a session's own slot (its prefix reused, nothing displaced) still wins
    own = slot_snap("own", 1, 500)
    assert policy.order([stale, own], pick(600))[0] == 1


def test_policy_avoids_waiting_for_a_slot_at_similar_cost() -> None:
    policy = CacheAware(tokens_per_outstanding=128, queue_tokens=512)
    # both slots of "full" are taken: its hit of 300 must outweigh a whole wait
    full = slot_snap("full", 2, 300)
    free = slot_snap("free", 1, 0)
    assert policy.order([full, free], pick(400))[0] == 1
    big = slot_snap("full", 2, 3900)
    assert policy.order([big, free], pick(4000))[0] == 0


def test_policy_options_are_checked() -> None:
    assert cache_aware({"min_hit_tokens": 16}).min_hit_tokens == 16
    assert cache_aware({"displaced_half_life": 2}).displaced_half_life == 2.0
    for bad in (
        {"min_hit_tokens": 0},
        {"load_factor": 0.5},
        {"nope": 1},
        {"displaced_half_life": 0},
        {"displaced_weight": -1},
        {"queue_tokens": 1.5},
    ):
        with pytest.raises(ValueError, match="cache_aware"):
            cache_aware(bad)


SLOTS_ONLY = CacheViewConfig(capacity_tokens=8192, slots=2, cache_ram_mib=0)
"""llama-server ``--parallel 2 --cache-ram 0``: a slot is the only cache."""


def test_view_names_the_slot_a_request_would_overwrite() -> None:
    view = BackendCacheView("llamacpp", SLOTS_ONLY)
    a, b = np.arange(1, 401, dtype=np.uint32), np.arange(1001, 1301, dtype=np.uint32)
    for request_id, ids, tick in ((1, a, 10), (2, b, 11)):
        view.start(request_id, view.seq(ids), ids, 8)
        view.finish(request_id, 8, tick)
    newcomer = np.arange(5001, 5201, dtype=np.uint32)
    # llama-server gives it the least recently used slot: a's 400 tokens and 7 outputs
    assert view.displaced(view.seq(newcomer), 15) == Displacement(407, 5)
    follow_up = np.concatenate((b, np.arange(9001, 9051, dtype=np.uint32)))
    lost = view.displaced(view.seq(follow_up), 15)
    assert lost == Displacement(7, 4)  # b's own slot: only its generated tokens go
    assert view.num_slots == 2
    sglang = BackendCacheView("sglang", CacheViewConfig(capacity_tokens=8192))
    assert sglang.displaced(sglang.seq(newcomer), 15) == NO_DISPLACEMENT
    assert sglang.num_slots is None
    # with --cache-ram the engine saves the slot to host memory before reusing it
    saved = BackendCacheView("llamacpp", CacheViewConfig(capacity_tokens=8192, slots=2))
    for request_id, ids in ((1, a), (2, b)):
        saved.start(request_id, saved.seq(ids), ids, 8)
        saved.finish(request_id, 8, 10)
    assert saved.displaced(saved.seq(newcomer), 15) == NO_DISPLACEMENT


def test_view_queues_requests_beyond_its_slots_like_the_engine() -> None:
    """llama-server defers a request that finds every slot busy and runs it when one
    frees: the view must then hold its prompt, or it predicts hits that are gone."""
    view = BackendCacheView("llamacpp", SLOTS_ONLY)
    prompts = [np.arange(1 + 1000 * i, 301 + 1000 * i, dtype=np.uint32) for i in range(3)]
    for request_id, ids in enumerate(prompts):
        view.start(request_id, view.seq(ids), ids, 8)
    assert view.predict(view.seq(prompts[0])) == 0  # every slot busy
    view.finish(0, 8)  # the third request takes the freed slot
    view.finish(1, 8)
    view.finish(2, 8)
    assert view.predict(view.seq(prompts[2])) == 299  # its prompt is cached now
    assert view.predict(view.seq(prompts[1])) == 299
    assert view.predict(view.seq(prompts[0])) == 0  # overwritten by the third
    view.model.check_invariants()


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "sglang"])
def test_view_predicts_what_it_was_fed(engine: str) -> None:
    view = BackendCacheView(engine, CacheViewConfig(capacity_tokens=4096, slots=2))
    first = np.arange(1, 301, dtype=np.uint32)
    assert view.predict(view.seq(first)) == 0
    view.start(1, view.seq(first), first, 64)
    view.finish(1, 20)
    follow_up = np.concatenate((first, np.arange(5000, 5100, dtype=np.uint32)))
    hit = view.predict(view.seq(follow_up))
    unit = view.model.unit_tokens
    assert 300 - unit < hit <= 300  # the first prompt, whole units
    other = np.arange(7000, 7300, dtype=np.uint32)
    assert view.predict(view.seq(other)) == 0
    view.model.check_invariants()


def test_session_chain_continues_to_the_same_hashes() -> None:
    tokens = np.arange(1, 1000, dtype=np.uint32)
    keys = SessionKeys()
    keys.keys(tokens[:500], "s")
    extended = keys.keys(tokens, "s")  # continues the session's chain
    assert np.array_equal(extended, chain_hashes(tokens, 1))
    assert extends(tokens, tokens[:10]) and not extends(tokens[:10], tokens)


@dataclass
class _ViewBackend:
    """What the router reads of a backend: its name and its cache view."""

    name: str
    cache_view: BackendCacheView

    def view(self) -> BackendCacheView:
        return self.cache_view


def test_router_predictions_equal_a_from_scratch_reference() -> None:
    """Memoised tokens, incremental session hashes and incremental finishes give the
    hits that full encodes and full hash chains give, turn after turn."""
    tokenizer = load_tokenizer()
    configs = [("llamacpp", 2), ("vllm", 4), ("sglang", 4), ("llamacpp", 1)]

    def views() -> list[BackendCacheView]:
        return [
            BackendCacheView(e, CacheViewConfig(capacity_tokens=6000, slots=n)) for e, n in configs
        ]

    backends = [_ViewBackend(f"b{i}", v) for i, v in enumerate(views())]
    reference = views()
    next_pseudo = [0] * len(reference)  # each view numbers its output tokens itself
    router = CacheRouter(PromptTokens(tokenizer), logging.getLogger("test"))
    rng = random.Random(3)
    sessions = [[{"role": "system", "content": f"Store {s}. " + "Rules. " * 150}] for s in range(3)]
    for turn in range(4):
        for s, messages in enumerate(sessions):
            messages.append({"role": "user", "content": f"Turn {turn}: {rng.random()}"})
            body = {"messages": messages, "max_tokens": 32}
            prediction = router.predict(body, backends, f"s{s}")  # type: ignore[arg-type]
            assert prediction is not None
            ids = tokenizer.encode_chat(messages)
            assert np.array_equal(prediction.token_ids, ids)
            assert prediction.hits == [v.predict(v.seq(ids)) for v in reference]
            chosen = rng.randrange(len(backends))
            lease = router.start(prediction, backends, backends[chosen], body)  # type: ignore[arg-type]
            num_output = rng.randrange(1, 40)
            lease.release(num_output)
            ref, request_id = reference[chosen], turn * 10 + s
            ref.model.pin(request_id, ref.seq(ids), ids.shape[0] + 32)
            first = next_pseudo[chosen]
            next_pseudo[chosen] += num_output - 1
            outputs = (np.arange(first, first + num_output - 1) + 0x8000_0000).astype(np.uint32)
            ref.model.unpin(request_id, ref.seq(np.concatenate((ids, outputs))))
            messages.append({"role": "assistant", "content": f"Answer {turn}."})
    assert sum(v.predict(v.seq(tokenizer.encode_chat(sessions[0]))) for v in reference) > 0


def test_gateway_routes_a_session_to_its_cache_and_says_why(
    loop_thread: LoopThread, fake: FakeUpstream, fake2: FakeUpstream
) -> None:
    config = (
        "backends:\n"
        f"  - {{name: f1, url: '{fake.url}', engine: vllm}}\n"
        f"  - {{name: f2, url: '{fake2.url}', engine: vllm}}\n"
        "routes: [{name: r, pool: default, policy: cache_aware, "
        "policy_options: {min_hit_tokens: 32}}]\n"
    )
    system = "You answer questions about the hardware store. " * 20
    chosen: dict[int, list[str]] = {0: [], 1: []}
    headers: list[str] = []
    with running_gateway(loop_thread, config) as gw, httpx.Client(base_url=gw.url) as client:
        for turn in range(4):
            for s in (0, 1):
                messages = [{"role": "system", "content": f"Store {s}. {system}"}]
                messages += [{"role": "user", "content": f"q{t}"} for t in range(turn + 1)]
                r = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
                assert r.status_code == 200
                chosen[s].append(r.headers["x-kvroute-backend"])
                headers.append(r.headers["x-kvroute-route"])
    assert all(len(set(backends)) == 1 for backends in chosen.values())  # sticky by cache
    assert chosen[0][0] != chosen[1][0]  # cold sessions spread by load
    assert headers[0].startswith("cache_aware prompt=") and "hit=f1:0,f2:0" in headers[0]
    assert "hit=f1:0,f2:0" not in headers[-1]


# -- real llama-server replicas ----------------------------------------------------------


def _drive(url: str, requests: list[Any], model: str, run_tag: str) -> None:
    with httpx.Client(base_url=url, timeout=120) as client:
        for req in requests:
            body: dict[str, Any] = dict(req.body)
            messages = [dict(m) for m in body["messages"]]
            messages[0]["content"] = f"{run_tag} {messages[0]['content']}"
            body |= {"messages": messages, "model": model, "max_tokens": 4, "temperature": 0}
            r = client.post(
                "/v1/chat/completions", json=body, headers={"x-session-id": req.session_id}
            )
            assert r.status_code == 200


@pytest.mark.engine
@pytest.mark.llamacpp
def test_cache_aware_beats_round_robin_on_llama_server(
    loop_thread: LoopThread, llamacpp_pool: list[EngineRecord]
) -> None:
    """A multi-turn workload (6 sessions, own system prompts) through two replicas:
    the engines' own cached-token counts are higher under cache_aware."""
    workload = MultiturnWorkload(
        turns=4.0,
        concurrent_sessions=6,
        system_tokens=150,
        shared_system=False,
        user_tokens=30,
        answer_tokens=8,
        think_s=0.0,
    )
    requests = workload.generate(18, GenContext.seeded(load_tokenizer(), 7))
    backends = "".join(
        f"  - {{name: {r.name}, url: '{r.base_url}', engine: llamacpp, "
        "cache: {slots: 4, capacity_tokens: 8192, cache_ram_mib: 0}}\n"
        for r in llamacpp_pool
    )
    hit_ratio: dict[str, float] = {}
    for policy in ("round_robin", "cache_aware"):
        config = f"backends:\n{backends}routes: [{{name: r, pool: default, policy: {policy}}}]\n"
        with running_gateway(loop_thread, config) as gw:
            _drive(gw.url, requests, llamacpp_pool[0].model_name, f"Run {policy}.")
            metrics = gw.gateway.metrics
            cached = sum(metrics.cached_tokens.values.values())
            prompt = sum(metrics.prompt_tokens.values.values())
            per_backend: Counter[str] = Counter()
            for labels, count in metrics.requests.values.items():
                per_backend[labels[0]] += int(count)
        hit_ratio[policy] = cached / prompt
        print(f"{policy}: engine-reported hit {cached:.0f}/{prompt:.0f}, by backend {per_backend}")
        assert len(per_backend) == 2  # both replicas used
    assert hit_ratio["cache_aware"] > hit_ratio["round_robin"] + 0.1, hit_ratio


def test_config_backend_cache_section() -> None:
    config = parse_config(
        "tokenizer: /models/m.gguf\n"
        "backends: [{name: a, url: 'http://127.0.0.1:1', engine: llamacpp,"
        " cache: {slots: 2, capacity_tokens: 4096}}]\n",
        "gw.yaml",
    )
    assert config.backends[0].cache == CacheViewConfig(capacity_tokens=4096, slots=2)
    assert config.tokenizer == "/models/m.gguf"
    with pytest.raises(InputError, match=r"gw\.yaml:1.*must be ≥ 1"):
        parse_config(
            "backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm, cache: {slots: 0}}]\n",
            "gw.yaml",
        )
