"""Batch formation of vLLM, SGLang and llama.cpp server, one step at a time.

Admission (which waiting request starts, whether it fits, its hit, slots and
``max_num_seqs``) is the cache models'; these classes decide what a step computes.

vLLM V1, as of v0.11/v0.12 (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``):
one token budget per step (``max_num_batched_tokens``); running requests first (each
decode one token, a partly prefilled prompt its next chunk), then waiting requests in
order while budget is left, each getting ``min(remaining, budget)`` tokens (chunked
prefill is always on in V1). Decodes and prefill chunks share the step. The running
requests' memory is taken first (``EngineView.reserve``): when KV blocks run out the
newest running request is preempted, and such a step starts no waiting request.

SGLang, as of v0.5.x (``python/sglang/srt/managers/scheduler.py``,
``get_next_batch_to_run`` / ``get_new_batch_prefill``; ``schedule_policy.py``,
``PrefillAdder``): a step is either a prefill batch or a decode batch, and a prefill
batch wins whenever one can be formed (mixed chunks are off by default). The prefill
batch takes the chunked request first, then waiting requests (order: the cache model's
``schedule_order``, LPM with its FCFS fallback past 128 waiting) within
``chunked_prefill_size`` new tokens and ``max_prefill_tokens`` input tokens; a request
that does not fit the chunk budget is cut and becomes the next chunked request.

llama.cpp server, as of b6xxx (``tools/server/server.cpp``, ``update_slots``): every
waiting task that finds a free slot starts at once; a batch of at most ``n_batch``
tokens holds one sampled token per generating slot first, then prompt tokens of the
slots still processing their prompt, in slot order; ``llama_decode`` runs it in
micro-batches of ``n_ubatch`` tokens, each a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.predict.base import BatchScheduler, EngineView, StepPlan
from kvroute.registry import Registry

IDLE = StepPlan((), False)


@dataclass(frozen=True, slots=True)
class VllmSchedulerConfig:
    max_num_batched_tokens: int = 8192
    """``--max-num-batched-tokens`` (vLLM's default for the OpenAI server on a large GPU)."""


@dataclass(frozen=True, slots=True)
class SglangSchedulerConfig:
    chunked_prefill_size: int = 8192
    """``--chunked-prefill-size`` (SGLang picks 8192 on 80-160 GB GPUs)."""
    max_prefill_tokens: int = 16384
    """``--max-prefill-tokens``."""


@dataclass(frozen=True, slots=True)
class LlamaCppSchedulerConfig:
    n_batch: int = 2048
    """``--batch-size``."""
    n_ubatch: int = 512
    """``--ubatch-size``."""


def _continue_prefills(view: EngineView, budget: int) -> tuple[list[tuple[int, int]], int]:
    """Chunks for the started prompts, in order, within ``budget`` tokens; and what is left."""
    chunks: list[tuple[int, int]] = []
    for i, req in enumerate(view.prefilling):
        if budget <= 0:
            break
        n = min(req.remaining_tokens, budget)
        chunks.append((i, n))
        budget -= n
    return chunks, budget


class VllmScheduler:
    name = "vllm"

    def __init__(self, config: VllmSchedulerConfig) -> None:
        self.config = config

    def plan(self, view: EngineView) -> StepPlan:
        chunks, budget = _continue_prefills(
            view, self.config.max_num_batched_tokens - view.num_decoding
        )
        kept, preempted = view.reserve(chunks)
        chunks = list(kept)
        # A step that preempted starts no waiting request (vLLM schedules WAITING only
        # when ``preempted_reqs`` is empty).
        while budget > 0 and not preempted:
            new = view.admit_next(budget)
            if new is None:
                break
            n = min(new.remaining_tokens, budget)
            chunks.append((len(view.prefilling) - 1, n))
            budget -= n
        return StepPlan(tuple(chunks), view.num_decoding > 0)


class SglangScheduler:
    name = "sglang"

    def __init__(self, config: SglangSchedulerConfig) -> None:
        self.config = config

    def plan(self, view: EngineView) -> StepPlan:
        rem_chunk = self.config.chunked_prefill_size
        rem_input = self.config.max_prefill_tokens
        chunks: list[tuple[int, int]] = []
        if view.prefilling:  # the chunked request (at most one) goes first
            n = min(view.prefilling[0].remaining_tokens, rem_chunk)
            chunks.append((0, n))
            rem_chunk -= n
            rem_input -= n
        while rem_chunk > 0 and rem_input > 0:
            req = view.admit_next()
            if req is None:
                break
            n = min(req.remaining_tokens, rem_chunk)
            chunks.append((len(view.prefilling) - 1, n))
            rem_chunk -= n
            rem_input -= req.remaining_tokens
        if chunks:
            return StepPlan(tuple(chunks), False)
        return StepPlan((), view.num_decoding > 0)


class LlamaCppScheduler:
    name = "llamacpp"

    def __init__(self, config: LlamaCppSchedulerConfig) -> None:
        self.config = config

    def plan(self, view: EngineView) -> StepPlan:
        while view.admit_next() is not None:
            pass
        chunks, budget = _continue_prefills(view, self.config.n_batch - view.num_decoding)
        total = self.config.n_batch - budget
        passes = max(1, -(-total // self.config.n_ubatch))
        return StepPlan(tuple(chunks), view.num_decoding > 0, passes)


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    vllm: VllmSchedulerConfig = VllmSchedulerConfig()
    sglang: SglangSchedulerConfig = SglangSchedulerConfig()
    llamacpp: LlamaCppSchedulerConfig = LlamaCppSchedulerConfig()


def schedulers(settings: SchedulerSettings | None = None) -> Registry[BatchScheduler]:
    """The batch schedulers by engine name: ``vllm``, ``sglang``, ``llamacpp``."""
    s = settings or SchedulerSettings()
    reg: Registry[BatchScheduler] = Registry("engine scheduler")
    reg.add("vllm", VllmScheduler(s.vllm))
    reg.add("sglang", SglangScheduler(s.sglang))
    reg.add("llamacpp", LlamaCppScheduler(s.llamacpp))
    return reg
