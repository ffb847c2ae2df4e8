"""The step replay on schedules small enough to work out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvroute.cache.capacity import load_presets
from kvroute.predict.engine import EngineFlags, EngineSim
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.replay import Arrivals
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
