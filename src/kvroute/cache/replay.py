"""Replay a trace through one prefix-cache model, in time.

A request occupies the cache from its start to its completion, so concurrent requests pin
memory and shape what gets evicted. Events, in time order (a completion before an arrival
at the same instant, so freed memory is seen)::

    arrival    -> the request joins the waiting queue
    completion -> model.unpin(final sequence)
    after each -> one scheduling pass: in the model's schedule_order, pin waiting requests
                  until one gets NO_ROOM (head-of-line blocking, as all three engines do)

A request that can never fit (TOO_LARGE) is rejected. When nothing runs and the head still
gets NO_ROOM, no completion can ever make room, so it is rejected too. Sequential traces
(no arrival times, no forced rate) run one request at a time. Timing is described in
:mod:`kvroute.cache.timing`. Deterministic: the model and the schedule are, and no clock
is read except to report ``elapsed_s``.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.cache.base import AdmitStatus, CacheSeq, CacheStats, CacheUsage, PrefixCache
from kvroute.cache.seq import SeqBuilder, SeqPair, trace_block_size
from kvroute.cache.timing import Schedule, TimingOptions, service_s
from kvroute.trace.records import Request

CHUNK_REQUESTS = 2048


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """Everything one replay measured. Per-request arrays are in trace order."""

    engine: str
    capacity_tokens: int | None
    unit_tokens: int
    prompt_tokens: npt.NDArray[np.int64]
    cached_tokens: npt.NDArray[np.int64]
    """Predicted cached prompt tokens per request (0 when rejected): the validation seam."""
    admitted: npt.NDArray[np.bool_]
    wait_s: npt.NDArray[np.float64]
    """Seconds from arrival to start (NaN when rejected or sequential)."""
    peak_pinned_tokens: int
    peak_running: int
    final_usage: CacheUsage
    stats: CacheStats
    elapsed_s: float


class _Seqs:
    """Prompt/final pairs in arrival order, built a chunk at a time on demand."""

    def __init__(
        self,
        requests: Sequence[Request],
        order: Sequence[int],
        builder: SeqBuilder,
        outputs: Sequence[int],
    ) -> None:
        self._requests = requests
        self._order = order
        self._builder = builder
        self._outputs = outputs
        self._built: dict[int, SeqPair] = {}
        self._next = 0

    def get(self, pos: int) -> tuple[int, SeqPair]:
        """The request index at arrival position ``pos`` and its pair (built at most once,
        forgotten once taken)."""
        while pos >= self._next:
            idx = list(self._order[self._next : self._next + CHUNK_REQUESTS])
            chunk = [self._requests[i] for i in idx]
            for i, pair in zip(
                idx,
                self._builder.build(chunk, idx, [self._outputs[i] for i in idx]),
                strict=True,
            ):
                self._built[i] = pair
            self._next += len(idx)
        rid = self._order[pos]
        return rid, self._built.pop(rid)


class _WaitingView(Sequence[CacheSeq]):
    """The waiting queue's prompts, as the model's ``schedule_order`` reads them."""

    def __init__(self, rids: deque[int], pairs: dict[int, SeqPair]) -> None:
        self._rids = rids
        self._pairs = pairs

    def __len__(self) -> int:
        return len(self._rids)

    def __getitem__(self, i: int) -> CacheSeq:  # type: ignore[override]
        return self._pairs[self._rids[i]].prompt

    def __iter__(self) -> Iterator[CacheSeq]:
        return (self._pairs[r].prompt for r in self._rids)


def replay(
    requests: Sequence[Request],
    model: PrefixCache,
    schedule: Schedule,
    timing: TimingOptions,
    *,
    cache_outputs: bool = True,
) -> ReplayOutcome:
    """Run ``requests`` through ``model`` (fresh, empty) under ``schedule``.

    ``cache_outputs=False`` keeps generated tokens out of the cache (see seq.py).
    The model is mutated. Raises ``InputError`` for prompts that are not tokenized, mix
    forms, or whose block size differs from the model's geometry.
    """
    started = time.perf_counter()
    n = len(requests)
    block = trace_block_size(requests[0]) if n else None
    builder = SeqBuilder(
        model.unit_tokens,
        block_size_tokens=block,
        cache_outputs=cache_outputs,
        keep_token_ids=model.needs_token_ids and block is None,
    )
    prompt_tokens = np.zeros(n, dtype=np.int64)
    cached = np.zeros(n, dtype=np.int64)
    admitted = np.zeros(n, dtype=bool)
    wait = np.full(n, np.nan)
    arrival = schedule.arrival_s
    order: Sequence[int] = (
        range(n) if arrival is None else np.argsort(arrival, kind="stable").tolist()
    )
    seqs = _Seqs(requests, order, builder, schedule.output_tokens)
    peak_running = 0
    if arrival is None:
        for pos in range(n):
            rid, pair = seqs.get(pos)
            prompt_tokens[rid] = pair.prompt.num_tokens
            adm = model.pin(rid, pair.prompt, pair.final.num_tokens)
            if adm.status is AdmitStatus.ADMITTED:
                admitted[rid] = True
                cached[rid] = adm.cached_tokens
                peak_running = 1
                model.unpin(rid, pair.final)
    else:
        peak_running = _timed(
            model, seqs, arrival, order, schedule, timing, prompt_tokens, cached, admitted, wait
        )
    stats = model.stats()
    return ReplayOutcome(
        engine=model.name,
        capacity_tokens=model.capacity_tokens,
        unit_tokens=model.unit_tokens,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        admitted=admitted,
        wait_s=wait,
        peak_pinned_tokens=stats.peak_pinned_tokens,
        peak_running=peak_running,
        final_usage=model.usage(),
        stats=stats,
        elapsed_s=time.perf_counter() - started,
    )


def _timed(
    model: PrefixCache,
    seqs: _Seqs,
    arrival: npt.NDArray[np.float64],
    order: Sequence[int],
    schedule: Schedule,
    timing: TimingOptions,
    prompt_tokens: npt.NDArray[np.int64],
    cached: npt.NDArray[np.int64],
    admitted: npt.NDArray[np.bool_],
    wait: npt.NDArray[np.float64],
) -> int:
    """The event loop; fills the per-request arrays, returns the peak running count."""
    n = len(order)
    arrivals: list[float] = arrival.tolist()
    run_s: list[float] = schedule.trace_run_s.tolist()
    outputs = schedule.output_tokens
    waiting: deque[int] = deque()
    pairs: dict[int, SeqPair] = {}
    running: dict[int, CacheSeq] = {}
    view = _WaitingView(waiting, pairs)
    heap: list[tuple[float, int]] = []
    peak_running = 0
    pos = 0
    inf = math.inf
    pin, unpin = model.pin, model.unpin
    ADMITTED, TOO_LARGE = AdmitStatus.ADMITTED, AdmitStatus.TOO_LARGE

    def start(rid: int, pair: SeqPair, hit: int, now: float) -> None:
        cached[rid] = hit
        admitted[rid] = True
        wait[rid] = now - arrivals[rid]
        run = run_s[rid]
        if math.isnan(run):  # no trace time: use the service model
            run = service_s(pair.prompt.num_tokens - hit, outputs[rid], timing)
        heapq.heappush(heap, (now + run, rid))
        running[rid] = pair.final

    while pos < n or heap:
        next_arrival = arrivals[order[pos]] if pos < n else inf
        if heap and heap[0][0] <= next_arrival:
            now, rid = heapq.heappop(heap)
            unpin(rid, running.pop(rid))
        else:
            now = next_arrival
            rid, pair = seqs.get(pos)
            pos += 1
            prompt_tokens[rid] = pair.prompt.num_tokens
            pairs[rid] = pair
            waiting.append(rid)
        while waiting:
            order_now = model.schedule_order(view)
            blocked = False
            if isinstance(order_now, range):
                # FCFS: start the head until one does not fit.
                while waiting:
                    rid = waiting[0]
                    pair = pairs[rid]
                    adm = pin(rid, pair.prompt, pair.final.num_tokens)
                    if adm.status is ADMITTED:
                        start(rid, pair, adm.cached_tokens, now)
                    elif adm.status is not TOO_LARGE:
                        blocked = True
                        break
                    waiting.popleft()
                    del pairs[rid]
            else:
                done: list[int] = []
                for i in order_now:
                    rid = waiting[i]
                    pair = pairs[rid]
                    adm = pin(rid, pair.prompt, pair.final.num_tokens)
                    if adm.status is ADMITTED:
                        start(rid, pair, adm.cached_tokens, now)
                    elif adm.status is not TOO_LARGE:
                        blocked = True
                        break
                    done.append(i)
                _remove(waiting, pairs, done)
            peak_running = max(peak_running, len(running))
            if blocked and not heap and waiting:
                # Nothing runs, so nothing will ever free room for the head: reject it.
                _remove(waiting, pairs, [model.schedule_order(view)[0]])
                continue
            break
    return peak_running


def _remove(waiting: deque[int], pairs: dict[int, SeqPair], positions: list[int]) -> None:
    """Take the requests at ``positions`` out of the waiting queue."""
    if not positions:
        return
    if positions == list(range(len(positions))):
        for _ in positions:
            pairs.pop(waiting.popleft())
        return
    gone = set(positions)
    keep = [r for i, r in enumerate(waiting) if i not in gone]
    for i in positions:
        pairs.pop(waiting[i])
    waiting.clear()
    waiting.extend(keep)
