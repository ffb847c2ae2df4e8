"""Each engine's batch formation on small hand-checked states."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvroute.predict.base import Prefilling
from kvroute.predict.schedulers import (
    LlamaCppScheduler,
    LlamaCppSchedulerConfig,
    SglangScheduler,
    SglangSchedulerConfig,
    VllmScheduler,
    VllmSchedulerConfig,
)


@dataclass
class _Req:
    remaining_tokens: int


@dataclass
class _View:
    """An engine state: ``room`` is how many waiting requests fit before the head blocks."""

    num_decoding: int
    waiting: list[int]
    started: list[_Req] = field(default_factory=list)
    room: int = 99

    @property
    def prefilling(self) -> Sequence[Prefilling]:
        return self.started

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def reserve(self, chunks: Sequence[tuple[int, int]]) -> tuple[Sequence[tuple[int, int]], bool]:
        return chunks, False

    def admit_next(self, max_new_tokens: int | None = None) -> Prefilling | None:
        if not self.waiting or self.room == 0:
            return None
        self.room -= 1
        req = _Req(self.waiting.pop(0))
        self.started.append(req)
        return req


def test_vllm_decodes_first_then_running_chunks_then_waiting_within_the_budget() -> None:
    sched = VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=16))
    view = _View(num_decoding=3, waiting=[5, 6, 7], started=[_Req(4)])
    plan = sched.plan(view)
    # budget 16 - 3 decodes = 13: the running prompt's 4, then 5, then 4 of the 6.
    assert plan.decode
    assert plan.chunks == ((0, 4), (1, 5), (2, 4))
    assert view.waiting == [7]  # the budget ran out: the third waiting request stays


def test_vllm_stops_admitting_at_the_head_that_does_not_fit() -> None:
    sched = VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=100))
    view = _View(num_decoding=0, waiting=[5, 6], room=1)
    plan = sched.plan(view)
    assert plan.chunks == ((0, 5),)
    assert not plan.decode


def test_sglang_prefers_a_prefill_batch_and_pauses_decodes() -> None:
    sched = SglangScheduler(SglangSchedulerConfig(chunked_prefill_size=8, max_prefill_tokens=100))
    view = _View(num_decoding=4, waiting=[3, 9, 2])
    plan = sched.plan(view)
    # 3 fits, then 9 is cut to the 5 left in the chunk and becomes the chunked request.
    assert plan.chunks == ((0, 3), (1, 5))
    assert not plan.decode
    assert view.waiting == [2]


def test_sglang_continues_the_chunked_request_first_then_decodes_when_idle() -> None:
    sched = SglangScheduler(SglangSchedulerConfig(chunked_prefill_size=8, max_prefill_tokens=100))
    view = _View(num_decoding=2, waiting=[], started=[_Req(4)])
    plan = sched.plan(view)
    assert plan.chunks == ((0, 4),)
    view2 = _View(num_decoding=2, waiting=[])
    plan2 = sched.plan(view2)
    assert plan2.chunks == () and plan2.decode


def test_sglang_max_prefill_tokens_limits_new_requests() -> None:
    sched = SglangScheduler(SglangSchedulerConfig(chunked_prefill_size=100, max_prefill_tokens=6))
    view = _View(num_decoding=0, waiting=[4, 4, 4])
    plan = sched.plan(view)
    assert plan.chunks == ((0, 4), (1, 4))  # 4 + 4 passes 6: no third


def test_llamacpp_fills_free_slots_then_one_batch_of_n_batch_in_ubatches() -> None:
    sched = LlamaCppScheduler(LlamaCppSchedulerConfig(n_batch=8, n_ubatch=4))
    view = _View(num_decoding=2, waiting=[5, 5, 5], room=2)  # two free slots
    plan = sched.plan(view)
    # 2 sampled tokens + 5 of the first prompt + 1 of the second = 8 = n_batch.
    assert plan.chunks == ((0, 5), (1, 1))
    assert plan.decode
    assert plan.num_passes == 2
    assert view.waiting == [5]  # no slot: it waits
