"""The step replay on schedules small enough to work out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvroute.cache.capacity import load_presets
from kvroute.predict.engine import EngineFlags, EngineSim
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.replay import Arrivals, ReplayTimes, replay
from kvroute.predict.schedulers import SchedulerSettings, VllmSchedulerConfig
from kvroute.predict.steptime import FEATURES, StepBasis
from kvroute.predict.workload import FixedWorkload

ONE_S_PER_STEP = (1.0,) + (0.0,) * (len(FEATURES) - 1)


def _basis() -> StepBasis:
    p = load_presets()
    return StepBasis(model_cost(p.models["smollm2-135m"]), hardware_for(p.gpus["h100-80gb"]))


def _sim(engine: str, budget: int = 8) -> EngineSim:
    flags = EngineFlags(
        scheduler=SchedulerSettings(vllm=VllmSchedulerConfig(max_num_batched_tokens=budget))
    )
    return EngineSim(engine, flags, capacity_tokens=100_000)


def test_one_request_vllm_chunks_its_prompt_then_decodes() -> None:
    sim = _sim("vllm", budget=8)
    reqs = FixedWorkload(isl=20, osl=4, num_requests=1).requests()
    work = sim.workload(reqs, [4], Arrivals(num_clients=1))
    t = sim.run(work, _basis(), ONE_S_PER_STEP)
    # 20 tokens in chunks of 8, 8, 4: the first token after step 3; 3 decodes: end at 6.
    assert t.first_token_s[0] == 3.0
    assert t.end_s[0] == 6.0
    assert t.num_steps == 6


def test_closed_loop_next_request_arrives_at_the_previous_end() -> None:
    sim = _sim("vllm", budget=64)
    reqs = FixedWorkload(isl=16, osl=3, num_requests=3).requests()
    work = sim.workload(reqs, [3] * 3, Arrivals(num_clients=1))
    t = sim.run(work, _basis(), ONE_S_PER_STEP)
    # each: 1 prefill step + 2 decode steps
    assert t.arrival_s.tolist() == [0.0, 3.0, 6.0]
    assert t.end_s.tolist() == [3.0, 6.0, 9.0]


def test_sglang_decodes_pause_while_a_newcomer_prefills() -> None:
    sim = _sim("sglang")
    reqs = FixedWorkload(isl=16, osl=10, num_requests=2).requests()
    work = sim.workload(reqs, [10, 10], Arrivals(times_s=np.array([0.0, 2.5])))
    t = sim.run(work, _basis(), ONE_S_PER_STEP)
    # r0: prefill step [0,1], decodes from 1; r1 arrives at 2.5 and is seen at the step
    # boundary 3, prefills in [3,4] while r0 waits, so r0's 9 decodes end at 11.
    assert t.first_token_s[0] == 1.0
    assert t.first_token_s[1] == 4.0
    assert t.end_s[0] == 11.0
    assert t.end_s[1] == 13.0


def test_coalesced_decodes_match_step_by_step_times() -> None:
    # With real coefficients, an open-loop arrival inside a run of decode-only steps must
    # start at the first step boundary after it, as if every step were taken one by one.
    coef = (1e-3, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    sim = _sim("vllm", budget=8192)
    reqs = FixedWorkload(isl=512, osl=200, num_requests=2).requests()
    basis = _basis()
    work = sim.workload(reqs, [200, 200], Arrivals(times_s=np.array([0.0, 0.05])))
    t = sim.run(work, basis, coef)
    solo = sim.run(sim.workload(reqs[:1], [200], Arrivals(num_clients=1)), basis, coef)
    # r1 starts at the end of the first of r0's steps that ends at or after 0.05 s.
    assert t.start_s[1] >= 0.05
    assert t.start_s[0] == 0.0
    assert math.isclose(t.first_token_s[0], solo.first_token_s[0])
    assert t.start_s[1] - 0.05 < 0.01


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_closed_loop_latencies_are_linear_in_the_coefficients(engine: str) -> None:
    coef = (2e-3, 1e-5, 1.5, 0.5, 1.2, 1e-5, 0.0, 0.0, 0.01, 1e-4)
    sim = _sim(engine, budget=2048)
    reqs = FixedWorkload(isl=700, osl=50, num_requests=24, prefix_tokens=320).requests()
    work = sim.workload(reqs, [50] * 24, Arrivals(num_clients=6))
    t = sim.run(work, _basis(), coef, record=True)
    assert t.first_basis is not None and t.arrival_basis is not None
    c = np.array(coef)
    lin = (t.first_basis - t.arrival_basis) @ c[:-2] + c[-2] + c[-1] * t.in_system
    np.testing.assert_allclose(lin, t.first_token_s - t.arrival_s, rtol=1e-9, atol=1e-12)
    assert t.admitted.all()
    assert (t.cached_tokens[6:] >= 320 - 16).all()  # the shared prefix hits once computed


# -- vLLM preemption when KV blocks run out -------------------------------------------
# vLLM's default 16-token blocks; capacity (n + 1) * 16 holds n blocks (one is the null
# block). Each step takes 1 s, so times count steps.


def _vllm_times(capacity: int, isl: int, osl: int, arrivals: Arrivals, budget: int) -> ReplayTimes:
    flags = EngineFlags(
        scheduler=SchedulerSettings(vllm=VllmSchedulerConfig(max_num_batched_tokens=budget))
    )
    sim = EngineSim("vllm", flags, capacity_tokens=capacity)
    n = len(arrivals.times_s) if arrivals.times_s is not None else 2
    reqs = FixedWorkload(isl=isl, osl=osl, num_requests=n).requests()
    return sim.run(sim.workload(reqs, [osl] * n, arrivals), _basis(), ONE_S_PER_STEP)


def test_vllm_preempts_the_newest_decode_when_blocks_run_out() -> None:
    # Two 32-token prompts, 50 tokens out, 8 blocks. Both prefill in step 1 and hold
    # 3 blocks after the first decode, 4 from context 49 (tick 16): the pool is full. At
    # tick 32 r0 needs a 5th: r1 (the newest) is preempted with 32 + 33 tokens known. Its
    # return needs 5 blocks while r0 holds 5 of 8 and r0's new block evicted r1's tail:
    # it waits for r0 (end at 50), then recomputes 65 - 48 hit = 17 tokens in one step
    # (51) and decodes its last 16 tokens: 67. First tokens are untouched.
    t = _vllm_times(9 * 16, 32, 50, Arrivals(num_clients=2), budget=64)
    assert t.preemptions.tolist() == [0, 1]
    assert t.first_token_s.tolist() == [1.0, 1.0]
    assert t.end_s.tolist() == [50.0, 67.0]
    ample = _vllm_times(100_000, 32, 50, Arrivals(num_clients=2), budget=64)
    assert ample.preemptions.tolist() == [0, 0]
    assert ample.end_s.tolist() == [50.0, 50.0]


def test_vllm_does_not_preempt_when_the_pool_holds_every_final_sequence() -> None:
    # Each final sequence is 32 + 49 = 81 tokens: 6 blocks. 12 blocks hold both: no
    # preemption, although all blocks are taken at the last step.
    t = _vllm_times(13 * 16, 32, 50, Arrivals(num_clients=2), budget=64)
    assert t.preemptions.tolist() == [0, 0]
    assert t.end_s.tolist() == [50.0, 50.0]
    # One block fewer: at the last decode (context 81) r1 is short and preempts itself;
    # its 80 computed tokens are 5 cached blocks, so its return recomputes 1 token and
    # that step samples its last token: one step late.
    t = _vllm_times(12 * 16, 32, 50, Arrivals(num_clients=2), budget=64)
    assert t.preemptions.tolist() == [0, 1]
    assert t.end_s.tolist() == [50.0, 51.0]


def test_vllm_preempting_a_prefilling_request_delays_its_first_token() -> None:
    # Budget 9: a lone 32-token prompt takes chunks 9, 9, 9, 5 (first token at 4). r1
    # arrives at 95 while r0 holds 8 of 9 blocks; its chunks of 8 take the last block,
    # and at 24 tokens it needs another: it is the newest, so it preempts itself. Its
    # cached first block is evicted when r0 takes its 9th block (tick 96); it starts
    # again when r0 ends (103), 4 chunks from scratch: first token at 107, not 99.
    both = Arrivals(times_s=np.array([0.0, 95.0]))
    t = _vllm_times(10 * 16, 32, 100, both, budget=9)
    ample = _vllm_times(100_000, 32, 100, both, budget=9)
    assert ample.first_token_s.tolist() == [4.0, 99.0]
    assert t.preemptions.tolist() == [0, 1]
    assert t.first_token_s.tolist() == [4.0, 107.0]
    assert t.end_s.tolist() == [103.0, 206.0]
    assert ample.end_s.tolist() == [103.0, 198.0]


class _WholeLifetime:
    """The vLLM model without its step methods: memory taken whole at start."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name in ("pin_steps", "grow", "room_tokens", "free_blocks", "preempt"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_vllm_step_memory_changes_nothing_while_blocks_suffice() -> None:
    coef = (2e-3, 1e-5, 1.5, 0.5, 1.2, 1e-5, 0.0, 0.0, 0.01, 1e-4)
    sim = _sim("vllm", budget=512)
    reqs = FixedWorkload(isl=300, osl=70, num_requests=30, prefix_tokens=160).requests()
    work = sim.workload(reqs, [70] * 30, Arrivals(num_clients=7))
    stepped = sim.run(work, _basis(), coef)
    whole = replay(
        work.pairs,
        work.output_tokens,
        work.arrivals,
        _WholeLifetime(sim.fresh_model(None)),  # type: ignore[arg-type]
        sim.scheduler,
        _basis(),
        coef,
    )
    assert stepped.preemptions.sum() == 0
    np.testing.assert_allclose(stepped.end_s, whole.end_s, rtol=1e-12)
    np.testing.assert_allclose(stepped.first_token_s, whole.first_token_s, rtol=1e-12)
    assert stepped.cached_tokens.tolist() == whole.cached_tokens.tolist()


@pytest.mark.parametrize("clients", [3, 8])
def test_vllm_under_kv_pressure_every_request_finishes_and_the_pool_stays_consistent(
    clients: int,
) -> None:
    coef = (2e-3, 1e-5, 1.5, 0.5, 1.2, 1e-5, 0.0, 0.0, 0.01, 1e-4)
    sim = EngineSim("vllm", EngineFlags(), capacity_tokens=41 * 16)  # 40 blocks
    reqs = FixedWorkload(isl=200, osl=300, num_requests=24, prefix_tokens=96).requests()
    work = sim.workload(reqs, [300] * 24, Arrivals(num_clients=clients))
    model = sim.fresh_model(None)
    t = replay(work.pairs, work.output_tokens, work.arrivals, model, sim.scheduler, _basis(), coef)
    assert t.admitted.all()
    assert t.preemptions.sum() > 0  # 3 x 500 tokens need 96 blocks at their ends
    assert (t.end_s > t.first_token_s).all()
    model.check_invariants()
    assert model.usage().pinned_tokens == 0


def test_sglang_requests_prefilled_in_one_batch_do_not_hit_each_other() -> None:
    # Four clients start together with prompts sharing 320 tokens: SGLang prefills them
    # in one batch and caches their prompts at its end, so none of them hits (measured
    # on SGLang-CPU: cached 0, 0, 0, 0 in the first wave); every later request hits the
    # shared prefix.
    sim = _sim("sglang")
    reqs = FixedWorkload(isl=700, osl=20, num_requests=12, prefix_tokens=320).requests()
    work = sim.workload(reqs, [20] * 12, Arrivals(num_clients=4))
    t = sim.run(work, _basis(), ONE_S_PER_STEP)
    assert t.cached_tokens[:4].tolist() == [0, 0, 0, 0]
    assert (t.cached_tokens[4:] >= 320).all()
    assert t.first_token_s[:4].tolist() == [1.0] * 4  # one prefill batch


def test_sglang_a_request_arriving_after_the_batch_hits_its_prompts() -> None:
    # r1 arrives while r0's prefill step runs ([0, 1]): it is admitted at the step
    # boundary 1, after r0's prompt entered the tree, and hits the shared prefix.
    sim = _sim("sglang")
    reqs = FixedWorkload(isl=700, osl=20, num_requests=2, prefix_tokens=320).requests()
    work = sim.workload(reqs, [20, 20], Arrivals(times_s=np.array([0.0, 0.5])))
    t = sim.run(work, _basis(), ONE_S_PER_STEP)
    assert t.cached_tokens[0] == 0
    assert t.cached_tokens[1] >= 320
