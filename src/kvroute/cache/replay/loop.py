"""Replay a trace through one prefix-cache model, in time.

A request occupies the cache from its start to its completion, so concurrent requests pin
memory and shape what gets evicted. Events, in time order (a completion before an arrival
at the same instant, so freed memory is seen)::

    arrival    -> the request joins the waiting queue
    completion -> every request that finishes at that instant is one engine step's release:
                  model.unpin(final sequence) for each, in the model's release_order
    after each -> one scheduling pass: in the model's schedule_order (told how many the
                  step released: llama.cpp restarts deferred requests newest first), pin
                  waiting requests until one gets NO_ROOM (head-of-line blocking)

A request that can never fit (TOO_LARGE) is rejected. When nothing runs and the head still
gets NO_ROOM, no completion can ever make room, so it is rejected too. Sequential traces
(no arrival times, no forced rate) run one request at a time. Timing is described in
:mod:`kvroute.cache.replay.timing`. Deterministic: the model and the schedule are, and no clock
is read except to report ``elapsed_s``.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.cache.base import AdmitStatus, CacheSeq, CacheStats, CacheUsage, PrefixCache
from kvroute.cache.replay.seq import SeqBuilder, SeqPair, trace_block_size
from kvroute.cache.replay.timing import Schedule, TimingOptions, service_s
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
    end_s: npt.NDArray[np.float64]
    """When it finished, on the arrivals' clock (NaN when rejected or sequential)."""
    peak_pinned_tokens: int
    peak_running: int
    final_usage: CacheUsage
    stats: CacheStats
    elapsed_s: float


class _Seqs:
    """Prompt/final pairs in arrival order, built a chunk at a time as arrivals reach them."""

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

    def chunks(self) -> Iterator[tuple[int, SeqPair]]:
        """(request index, pair) in arrival order; each chunk is built when first reached
        and dropped once passed."""
        order, requests, outputs = self._order, self._requests, self._outputs
        for lo in range(0, len(order), CHUNK_REQUESTS):
            idx = list(order[lo : lo + CHUNK_REQUESTS])
            pairs = self._builder.build([requests[i] for i in idx], idx, [outputs[i] for i in idx])
            yield from zip(idx, pairs, strict=True)


class SharedSeqs:
    """Every request's pairs, built once and replayed by several models: the points of a
    capacity sweep, or engines that work on the same units (every model of a hash-only
    trace works on its blocks). Sequences are read-only, so sharing them changes no
    result; it saves hashing them again per replay. Holds the whole trace's keys, so
    callers share only traces under a budget (:func:`shareable`)."""

    def __init__(
        self, requests: Sequence[Request], schedule: Schedule, builder: SeqBuilder
    ) -> None:
        self.unit_tokens = builder.unit_tokens
        self.cache_outputs = builder.cache_outputs
        self.keep_token_ids = builder.keep_token_ids
        self.order = _arrival_order(len(requests), schedule)
        self.pairs = [
            pair
            for _, pair in _Seqs(requests, self.order, builder, schedule.output_tokens).chunks()
        ]

    def fits(self, builder: SeqBuilder) -> bool:
        return (
            builder.unit_tokens == self.unit_tokens
            and builder.cache_outputs == self.cache_outputs
            and builder.keep_token_ids == self.keep_token_ids
        )

    def chunks(self) -> Iterator[tuple[int, SeqPair]]:
        return zip(self.order, self.pairs, strict=True)


SHARED_KEYS_BUDGET = 16_000_000
"""Most keys (8 bytes each, plus two small objects per request) a shared build holds."""


def shareable(requests: Sequence[Request], unit_tokens: int, outputs: Sequence[int]) -> bool:
    """Whether the trace's sequences at ``unit_tokens`` fit :data:`SHARED_KEYS_BUDGET`."""
    keys = 0
    for r, o in zip(requests, outputs, strict=True):
        keys += (int(getattr(r.prompt, "num_tokens", 0)) + o) // unit_tokens + 2
        if keys > SHARED_KEYS_BUDGET:
            return False
    return True


def seq_builder(
    requests: Sequence[Request], model: PrefixCache, *, cache_outputs: bool = True
) -> SeqBuilder:
    """The builder of the sequences ``model`` replays ``requests`` on."""
    block = trace_block_size(requests[0]) if len(requests) else None
    return SeqBuilder(
        model.unit_tokens,
        block_size_tokens=block,
        cache_outputs=cache_outputs,
        keep_token_ids=model.needs_token_ids and block is None,
    )


def _arrival_order(n: int, schedule: Schedule) -> Sequence[int]:
    arrival = schedule.arrival_s
    return range(n) if arrival is None else np.argsort(arrival, kind="stable").tolist()


class WaitingView(Sequence[CacheSeq]):
    """The waiting queue's prompts, as the model's ``schedule_order`` reads them (also
    the latency replay's, :mod:`kvroute.predict.replay`)."""

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
    shared: SharedSeqs | None = None,
) -> ReplayOutcome:
    """Run ``requests`` through ``model`` (fresh, empty) under ``schedule``.

    ``cache_outputs=False`` keeps generated tokens out of the cache (see seq.py).
    ``shared``: sequences built once for several replays (used when they were built the
    way this model needs them, else built again). The model is mutated. Raises
    ``InputError`` for prompts that are not tokenized, mix forms, or whose block size
    differs from the model's geometry.
    """
    started = time.perf_counter()
    n = len(requests)
    builder = seq_builder(requests, model, cache_outputs=cache_outputs)
    arrival = schedule.arrival_s
    seqs: Iterator[tuple[int, SeqPair]]
    if shared is not None and shared.fits(builder):
        order = shared.order
        seqs = shared.chunks()
    else:
        order = _arrival_order(n, schedule)
        seqs = _Seqs(requests, order, builder, schedule.output_tokens).chunks()
    out = _PerRequest(n)
    # The replay makes millions of small objects and no garbage cycles: the cyclic
    # collector would only rescan the models' live state (~10 % of the time on large pools).
    collecting = gc.isenabled()
    gc.disable()
    try:
        if arrival is None:
            peak_running = _sequential(model, seqs, out)
        else:
            peak_running = _timed(model, seqs, arrival.tolist(), order, schedule, timing, out)
    finally:
        if collecting:
            gc.enable()
    stats = model.stats()
    return ReplayOutcome(
        engine=model.name,
        capacity_tokens=model.capacity_tokens,
        unit_tokens=model.unit_tokens,
        prompt_tokens=np.array(out.prompt_tokens, dtype=np.int64),
        cached_tokens=np.array(out.cached, dtype=np.int64),
        admitted=np.array(out.admitted, dtype=bool),
        wait_s=np.array(out.wait_s, dtype=np.float64),
        end_s=np.array(out.end_s, dtype=np.float64),
        peak_pinned_tokens=stats.peak_pinned_tokens,
        peak_running=peak_running,
        final_usage=model.usage(),
        stats=stats,
        elapsed_s=time.perf_counter() - started,
    )


class _PerRequest:
    """The per-request results as plain lists (cheaper to fill than numpy arrays)."""

    def __init__(self, n: int) -> None:
        self.prompt_tokens = [0] * n
        self.cached = [0] * n
        self.admitted = [False] * n
        self.wait_s = [math.nan] * n
        self.end_s = [math.nan] * n


def _sequential(model: PrefixCache, seqs: Iterator[tuple[int, SeqPair]], out: _PerRequest) -> int:
    """One request at a time; returns the peak running count."""
    peak_running = 0
    for rid, pair in seqs:
        prompt, final = pair.prompt, pair.final
        out.prompt_tokens[rid] = prompt.num_tokens
        adm = model.pin(rid, prompt, final.num_tokens)
        if adm.status is AdmitStatus.ADMITTED:
            out.admitted[rid] = True
            out.cached[rid] = adm.cached_tokens
            peak_running = 1
            model.unpin(rid, final)
    return peak_running


def _timed(
    model: PrefixCache,
    seqs: Iterator[tuple[int, SeqPair]],
    arrivals: list[float],
    order: Sequence[int],
    schedule: Schedule,
    timing: TimingOptions,
    out: _PerRequest,
) -> int:
    """The event loop; fills ``out``, returns the peak running count."""
    n = len(order)
    run_s: list[float] = schedule.trace_run_s.tolist()
    outputs = schedule.output_tokens
    prompt_tokens, cached, admitted, wait = out.prompt_tokens, out.cached, out.admitted, out.wait_s
    end = out.end_s
    waiting: deque[int] = deque()
    pairs: dict[int, SeqPair] = {}
    running: dict[int, CacheSeq] = {}
    view = WaitingView(waiting, pairs)
    heap: list[tuple[float, int]] = []
    heappush, heappop = heapq.heappush, heapq.heappop
    peak_running = 0
    pos = 0
    inf = math.inf
    isnan = math.isnan
    pin, unpin, schedule_order = model.pin, model.unpin, model.schedule_order
    ADMITTED, TOO_LARGE = AdmitStatus.ADMITTED, AdmitStatus.TOO_LARGE
    # The last pass stopped at a request that did not fit and nothing finished since: with
    # FCFS the same request is tried first again and the model has not changed, so an
    # arrival cannot start anything and needs no pass.
    blocked = False

    def start(rid: int, pair: SeqPair, hit: int, now: float) -> None:
        cached[rid] = hit
        admitted[rid] = True
        wait[rid] = now - arrivals[rid]
        run = run_s[rid]
        if isnan(run):  # no trace time: use the service model
            run = service_s(pair.prompt.num_tokens - hit, outputs[rid], timing)
        end[rid] = now + run
        heappush(heap, (now + run, rid))
        running[rid] = pair.final

    next_arrival = arrivals[order[0]] if n else inf
    while pos < n or heap:
        num_released = 0
        if heap and heap[0][0] <= next_arrival:
            now, rid = heappop(heap)
            if heap and heap[0][0] == now:  # several finish in one step: released together
                step = [rid]
                while heap and heap[0][0] == now:
                    step.append(heappop(heap)[1])
                for rid in model.release_order(step):
                    unpin(rid, running.pop(rid))
                num_released = len(step)
            else:
                unpin(rid, running.pop(rid))
                num_released = 1
            blocked = False
            if not waiting:
                continue
        else:
            now = next_arrival
            rid, pair = next(seqs)
            pos += 1
            next_arrival = arrivals[order[pos]] if pos < n else inf
            prompt_tokens[rid] = pair.prompt.num_tokens
            if not waiting:  # the queue is empty: the newcomer is the only one to try
                adm = pin(rid, pair.prompt, pair.final.num_tokens)
                if adm.status is ADMITTED:
                    start(rid, pair, adm.cached_tokens, now)
                    peak_running = max(peak_running, len(running))
                elif adm.status is not TOO_LARGE and heap:
                    waiting.append(rid)  # else nothing runs to make room: rejected
                    pairs[rid] = pair
                    blocked = True
                continue
            waiting.append(rid)
            pairs[rid] = pair
        while waiting:
            order_now = schedule_order(view, num_released=num_released)
            fcfs = isinstance(order_now, range)
            if fcfs and blocked:
                break
            stopped = False
            if fcfs:
                # Start the head until one does not fit.
                while waiting:
                    rid = waiting[0]
                    pair = pairs[rid]
                    adm = pin(rid, pair.prompt, pair.final.num_tokens)
                    if adm.status is ADMITTED:
                        start(rid, pair, adm.cached_tokens, now)
                    elif adm.status is not TOO_LARGE:
                        stopped = True
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
                        stopped = True
                        break
                    done.append(i)
                _remove(waiting, pairs, done)
            # Another order may put a newcomer first, so only FCFS can skip passes.
            blocked = stopped and fcfs
            peak_running = max(peak_running, len(running))
            if stopped and not heap and waiting:
                # Nothing runs, so nothing will ever free room for the head: reject it.
                _remove(waiting, pairs, [schedule_order(view)[0]])
                blocked = False
                num_released = 0
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
