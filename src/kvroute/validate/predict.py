"""The engine's cache model replayed over a run as it happened (pure).

Nothing measured about the cache feeds the prediction: only the schedule (when the
engine started and released each request, :func:`engine_times`) and the generated
outputs, which a log of a real run would hold anyway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.cache.base import CacheGeometry
from kvroute.cache.registry import cache_models
from kvroute.cache.replay.loop import ReplayOutcome, replay
from kvroute.cache.replay.timing import ArrivalSource, Schedule, TimingOptions
from kvroute.trace.records import Request, TokenPrompt
from kvroute.types import TokenIds
from kvroute.validate.result import EngineSetup, Served

MAX_PASSES = 8


@dataclass(frozen=True, slots=True)
class ModelReplay:
    """The engine's cache model replayed over one served run: what it predicts each
    request found cached (``outcome``), from the run's schedule alone."""

    outcome: ReplayOutcome
    requests: list[Request]
    """The run as it happened (token prompts, send/answer times, generated outputs, the
    engine's per-response cached tokens as ``reported_cached_tokens``), for ``simulate()``."""
    served: list[Served]
    passes: int


def engine_times(
    served: Sequence[Served], lead_s: float, *, num_slots: int | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Start and end of each request on the engine's clock, as well as a client can tell.

    An engine releases finished requests at the end of a step and starts queued ones at
    the top of the next. A client reads one step's answers a few milliseconds apart and,
    in a closed loop, sends new requests in between, which the engine starts only after
    all of that step's releases. So a request ends ``lead_s`` before its answer was read
    (``lead_s`` must exceed that spread and stay under one step), and answers read within
    ``lead_s`` of each other are one step's releases, which llama.cpp makes in slot order:
    they end in that order, so the least recently used slot is the same in the model.

    Starts are :attr:`Served.started_s`; those within ``lead_s`` are one step's, put in the
    order the engine takes them from its queue: send order, except on llama.cpp
    (``num_slots`` given) for requests that found every slot busy: each release moves the
    oldest of them to the front of the queue, so a step that frees several slots starts
    them newest first, ahead of the rest (``server_queue::pop_deferred_task``).
    """
    sent = np.array([s.sent_s for s in served], dtype=np.float64)
    done = np.array([s.done_s for s in served], dtype=np.float64)
    start = np.array([s.started_s for s in served], dtype=np.float64)
    if num_slots is None:
        deferred = np.zeros(len(served), dtype=bool)
    else:  # requests running when each was sent (started before it, not yet released)
        running = np.searchsorted(np.sort(start), sent, "left") - np.searchsorted(
            np.sort(done - lead_s), sent, "right"
        )
        deferred = running >= num_slots
    for step in _steps(start, lead_s):
        queue = sorted(step, key=lambda k: (not deferred[k], (-1 if deferred[k] else 1) * sent[k]))
        start[queue] = np.sort(start[step]) + 1e-6 * np.arange(len(step))
    end = done - lead_s
    for step in _steps(end, lead_s):
        slots = [served[k].slot_id for k in step]
        if len(step) > 1 and all(slot is not None for slot in slots):
            by_slot = [k for _, k in sorted(zip(slots, step, strict=True))]
            end[by_slot] = np.sort(end[step])
    return start, np.maximum(end, start)


def _steps(times: npt.NDArray[np.float64], gap_s: float) -> Iterator[list[int]]:
    """Indices grouped by time: sorted, a new group wherever the gap reaches ``gap_s``."""
    group: list[int] = []
    for k in np.argsort(times, kind="stable").tolist():
        if group and times[k] - times[group[-1]] >= gap_s:
            yield group
            group = []
        group.append(k)
    if group:
        yield group


def predict(
    prompt_ids: Sequence[TokenIds], served: Sequence[Served], setup: EngineSetup, *, lead_s: float
) -> ModelReplay:
    """Replay the engine's model over the run as it happened (:func:`engine_times`), on the
    engine's own prompt tokens where it returned them (vLLM), else on ``prompt_ids``.

    Where the model makes a request wait for room (the engine queued it too, or the times
    are a little off), the replay would end it late by the wait, so its run time is
    shortened by the wait and the replay repeated until the waits settle (at most
    ``MAX_PASSES`` passes; a closed loop within the engine's slots takes one).
    """
    slots = setup.reported.get("num_slots") if setup.engine == "llamacpp" else None
    start, end = engine_times(served, lead_s, num_slots=slots)
    outputs = [s.output_tokens for s in served]
    factory = cache_models(setup.settings).get(setup.engine)
    geometry = CacheGeometry(setup.capacity_tokens)
    timing = TimingOptions()
    requests = [
        Request(
            prompt=TokenPrompt(ids if s.prompt_token_ids is None else s.prompt_token_ids),
            output_len=s.output_tokens,
            output_token_ids=s.output_token_ids,
            reported_cached_tokens=s.cached_tokens,
        )
        for ids, s in zip(prompt_ids, served, strict=True)
    ]
    arrival = start - start.min()
    run = end - start
    passes = 0
    while True:
        passes += 1
        schedule = Schedule(ArrivalSource.TRACE, arrival, outputs, run, 0)
        outcome = replay(requests, factory(geometry), schedule, timing)
        next_run = np.maximum(end - start - np.nan_to_num(outcome.wait_s), 0.0)
        if passes >= MAX_PASSES or np.allclose(next_run, run, rtol=0, atol=1e-6):
            break
        run = next_run
    timed = [
        dataclasses.replace(r, arrival_s=float(a), end_s=float(a + t))
        for r, a, t in zip(requests, arrival, run, strict=True)
    ]
    return ModelReplay(outcome, timed, list(served), passes)
