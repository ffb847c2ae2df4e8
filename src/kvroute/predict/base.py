"""The interface every engine's batch formation implements, and what it reads.

The replay (:mod:`kvroute.predict.replay`) owns time, the KV cache model and the request
states; once per engine step it asks the engine's :class:`BatchScheduler` what the step
runs. The scheduler sees the waiting queue only through :meth:`EngineView.admit_next`,
which starts the request the cache model's ``schedule_order`` puts first (head-of-line:
``None`` when it does not fit now), so admission, hits and slot choice stay the cache
models' (:mod:`kvroute.cache`), and the schedulers add only what a step holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Prefilling(Protocol):
    """A started request whose prompt is not fully computed yet."""

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens still to compute (the cached hit is already subtracted)."""
        ...


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One step: prefill chunks (index into :attr:`EngineView.prefilling`, new tokens),
    whether every decoding request runs one token, and the forward passes it takes."""

    chunks: tuple[tuple[int, int], ...]
    decode: bool
    num_passes: int = 1


class EngineView(Protocol):
    """What a scheduler may read and do during one step's formation."""

    @property
    def num_decoding(self) -> int:
        """Requests past their prompt, generating."""
        ...

    @property
    def prefilling(self) -> Sequence[Prefilling]:
        """Started requests still computing their prompt, in start order (grows as
        :meth:`admit_next` starts requests)."""
        ...

    @property
    def num_waiting(self) -> int: ...

    def admit_next(self, max_new_tokens: int | None = None) -> Prefilling | None:
        """Start the waiting request the cache model would start next (pinning its KV),
        appended to :attr:`prefilling`; ``None`` when the queue is empty or its head does
        not fit now. Mutates. ``max_new_tokens``: the chunk it gets this step, where the
        cache model takes memory step by step (vLLM: the hit plus that chunk must fit)."""
        ...

    def reserve(self, chunks: Sequence[tuple[int, int]]) -> tuple[Sequence[tuple[int, int]], bool]:
        """Memory for this step's running work: ``chunks`` (as in :class:`StepPlan`) and
        one token per decoding request, taken in start order. Where the cache model
        takes memory step by step and the free blocks fall short, the newest running
        request is preempted (recompute: its memory freed, back to the queue's head)
        until the rest fits, as vLLM V1 does. Returns the chunks that still run and
        whether any request was preempted. Other cache models took all memory at
        start: ``chunks`` unchanged and ``False``."""
        ...


class BatchScheduler(Protocol):
    """One engine's batch formation. Implementations: schedulers.py."""

    @property
    def name(self) -> str:
        """The engine's registry name (``vllm``, ``sglang``, ``llamacpp``)."""
        ...

    def plan(self, view: EngineView) -> StepPlan:
        """What the next step runs; may start requests through ``view.admit_next``. An
        empty plan (no chunks, no decode) means nothing can run until a request arrives."""
        ...
