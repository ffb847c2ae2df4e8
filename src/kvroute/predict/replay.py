"""A discrete-event replay of one engine serving a trace, step by step.

Time advances one engine step at a time. Before each step, requests that have arrived
join the waiting queue; the engine's :class:`~kvroute.predict.base.BatchScheduler` forms
the step (starting requests through the cache model, which decides hits, room and slots);
the step takes ``coefficients . basis(step)`` seconds (:mod:`kvroute.predict.steptime`).
A request's first token comes at the end of the step that computes its last prompt token;
each later token takes one decode step; it finishes (and is unpinned in the engine's
release order) at the end of the step that samples its last token::

    arrival --queue--> start --prefill chunks--> first token --(output-1) decodes--> end

Runs of decode-only steps with nothing to start and no arrival due are summed in closed
form (the batch is fixed and every basis term is linear in the context), so long outputs
cost one event per batch change, not per token.

Arrivals are either given times (open loop) or a closed loop of ``num_clients`` clients,
each sending its next request (in trace order) when its previous one ends. Pure and
deterministic: no clock, no randomness.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.cache.base import AdmitStatus, PrefixCache
from kvroute.cache.replay import WaitingView
from kvroute.cache.seq import SeqPair
from kvroute.predict.base import BatchScheduler, Prefilling
from kvroute.predict.steptime import (
    MEMORY,
    NUM_STEP,
    PREFILL,
    StepBasis,
    StepShape,
    Vector,
    dot,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Arrivals:
    """Open loop (``times_s`` per request, trace order) or closed loop (``num_clients``)."""

    times_s: FloatArray | None = None
    num_clients: int | None = None

    def __post_init__(self) -> None:
        if (self.times_s is None) == (self.num_clients is None):
            raise ValueError("give arrival times or a number of clients, not both")
        if self.num_clients is not None and self.num_clients < 1:
            raise ValueError("a closed loop needs at least one client")


@dataclass(frozen=True, slots=True)
class ReplayTimes:
    """Per request (trace order), seconds from the first arrival; NaN where rejected.
    ``*_basis`` hold the cumulative step basis at arrival, first token and end (closed
    loop only: there every instant is a step boundary, so each latency is linear in the
    coefficients; the fit reads them)."""

    arrival_s: FloatArray
    start_s: FloatArray
    first_token_s: FloatArray
    end_s: FloatArray
    cached_tokens: npt.NDArray[np.int64]
    prompt_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    admitted: npt.NDArray[np.bool_]
    uncached_prefill_s: FloatArray
    """The request's own prompt compute (its new tokens' FLOPs), summed over its chunks."""
    cached_attention_s: FloatArray
    """Its chunks' attention over, and KV reads of, the cached prefix."""
    in_system: FloatArray
    """Requests in the engine (waiting or running) when it arrived."""
    num_steps: int
    busy_s: float
    """Seconds with at least one step running."""
    arrival_basis: FloatArray | None
    first_basis: FloatArray | None
    end_basis: FloatArray | None


class _Req:
    __slots__ = ("cached", "done", "out_len", "prompt_len", "rid")

    def __init__(self, rid: int, prompt_len: int, out_len: int) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.out_len = out_len
        self.cached = 0
        self.done = 0

    @property
    def remaining_tokens(self) -> int:
        return self.prompt_len - self.done


class _Engine:
    """The engine's request states: the :class:`~kvroute.predict.base.EngineView`."""

    def __init__(self, model: PrefixCache, pairs: Sequence[SeqPair], outputs: Sequence[int]):
        self.model = model
        self.pairs = pairs
        self.outputs = outputs
        self.waiting: deque[int] = deque()
        self.view = WaitingView(self.waiting, dict(enumerate(pairs)))
        self.prefilling_list: list[_Req] = []
        self.num_decoding = 0
        self.blocked = False
        self.num_released = 0
        self.started: list[_Req] = []
        self.rejected: list[int] = []
        self.hits = [0] * len(pairs)

    @property
    def prefilling(self) -> Sequence[Prefilling]:
        return self.prefilling_list

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def admit_next(self) -> Prefilling | None:
        while self.waiting and not self.blocked:
            order = self.model.schedule_order(self.view, num_released=self.num_released)
            pos = order[0]
            rid = self.waiting[pos]
            pair = self.pairs[rid]
            adm = self.model.pin(rid, pair.prompt, pair.final.num_tokens)
            if adm.status is AdmitStatus.NO_ROOM:
                self.blocked = True
                return None
            del self.waiting[pos]
            self.num_released = 0
            if adm.status is AdmitStatus.TOO_LARGE:
                self.rejected.append(rid)
                continue
            req = _Req(rid, pair.prompt.num_tokens, self.outputs[rid])
            req.cached = req.done = self.hits[rid] = adm.cached_tokens
            self.prefilling_list.append(req)
            self.started.append(req)
            return req
        return None

    def reject_head(self) -> None:
        """Nothing runs and the head does not fit: nothing will ever make room for it."""
        order = self.model.schedule_order(self.view)
        rid = self.waiting[order[0]]
        del self.waiting[order[0]]
        self.rejected.append(rid)
        self.blocked = False


def replay(
    pairs: Sequence[SeqPair],
    output_tokens: Sequence[int],
    arrivals: Arrivals,
    model: PrefixCache,
    scheduler: BatchScheduler,
    basis: StepBasis,
    coefficients: Vector,
    *,
    record_basis: bool = False,
) -> ReplayTimes:
    """Serve ``pairs`` (prompt/final sequences in trace order, see
    :mod:`kvroute.cache.seq`) on a fresh ``model`` with ``scheduler``'s batch formation.
    ``coefficients`` holds the step features first, then the per-request overhead.
    ``record_basis`` (closed loop only) keeps the cumulative basis per request."""
    n = len(pairs)
    coef = tuple(float(c) for c in coefficients)
    request_s = coef[NUM_STEP] if len(coef) > NUM_STEP else 0.0
    per_running_s = coef[NUM_STEP + 1] if len(coef) > NUM_STEP + 1 else 0.0
    in_system = np.zeros(n)
    num_in_system = 0
    eng = _Engine(model, pairs, output_tokens)
    arrival = np.full(n, np.nan)
    start = np.full(n, np.nan)
    first = np.full(n, np.nan)
    end = np.full(n, np.nan)
    uncached_s = np.zeros(n)
    cached_attn_s = np.zeros(n)
    closed = arrivals.num_clients is not None
    record = record_basis and closed
    arr_b = np.zeros((n, NUM_STEP)) if record else None
    first_b = np.zeros((n, NUM_STEP)) if record else None
    end_b = np.zeros((n, NUM_STEP)) if record else None
    cum = np.zeros(NUM_STEP)

    times: list[float]
    if arrivals.times_s is not None:
        times = [float(t) for t in arrivals.times_s]
        order = sorted(range(n), key=times.__getitem__)
    else:
        times = []
        order = list(range(n))
    pos = 0
    now = 0.0
    tick = 0
    busy = 0.0
    num_steps = 0
    dec_heap: list[tuple[int, int]] = []
    dec_offset = 0  # sum over decoders of (context at entry - entry tick)
    dec_entry: dict[int, tuple[int, int]] = {}

    def arrive(rid: int, t: float) -> None:
        nonlocal num_in_system
        arrival[rid] = t
        in_system[rid] = num_in_system
        num_in_system += 1
        if arr_b is not None:
            arr_b[rid] = cum
        eng.waiting.append(rid)
        eng.blocked = False

    if closed:
        assert arrivals.num_clients is not None
        for _ in range(min(arrivals.num_clients, n)):
            arrive(order[pos], 0.0)
            pos += 1

    def finish(rids: list[int]) -> None:
        nonlocal pos, num_in_system
        num_in_system -= len(rids)
        for rid in model.release_order(sorted(rids)):
            model.unpin(rid, pairs[rid].final)
            end[rid] = now + request_s + per_running_s * in_system[rid]
            if end_b is not None:
                end_b[rid] = cum
        eng.num_released = len(rids)
        eng.blocked = False
        if closed:
            for _ in rids:
                if pos < n:
                    arrive(order[pos], now)
                    pos += 1

    while True:
        if not closed:
            while pos < n and times[order[pos]] <= now:
                arrive(order[pos], times[order[pos]])
                pos += 1
        plan = scheduler.plan(eng)
        for req in eng.started:
            start[req.rid] = now
        eng.started.clear()
        if not plan.chunks and not plan.decode:
            if eng.waiting and eng.blocked and not eng.prefilling_list and eng.num_decoding == 0:
                eng.reject_head()
                continue
            if not closed and pos < n:
                now = max(now, times[order[pos]])
                continue
            break
        num_dec = eng.num_decoding
        dec_ctx = dec_offset + num_dec * tick
        if not plan.chunks and not eng.prefilling_list and (not eng.waiting or eng.blocked):
            # Decode-only until the batch changes: sum k steps in closed form.
            v0 = np.array(basis.vector(StepShape(num_decodes=num_dec, decode_ctx=dec_ctx)))
            v1 = np.array(
                basis.vector(StepShape(num_decodes=num_dec, decode_ctx=dec_ctx + num_dec))
            )
            slope = v1 - v0
            a = dot(coef, tuple(v0))
            b = dot(coef, tuple(slope))
            k = dec_heap[0][0] - tick
            if not closed and pos < n:
                k = min(k, _steps_to_reach(times[order[pos]] - now, a, b))
            k = max(k, 1)
            tri = k * (k - 1) / 2.0
            dt = k * a + b * tri
            cum += k * v0 + slope * tri
            now += dt
            busy += dt
            tick += k
            num_steps += k
        else:
            prefill_tokens = 0
            attn = 0.0
            ctx = 0
            reqs = eng.prefilling_list
            for i, cnt in plan.chunks:
                r = reqs[i]
                prefill_tokens += cnt
                attn += cnt * r.done + cnt * cnt / 2.0
                ctx += r.done
            shape = StepShape(
                num_prefill_tokens=prefill_tokens,
                prefill_attn=attn,
                prefill_ctx=ctx,
                num_chunks=len(plan.chunks),
                num_decodes=num_dec if plan.decode else 0,
                decode_ctx=dec_ctx if plan.decode else 0,
                num_passes=plan.num_passes,
            )
            v = basis.vector(shape)
            dt = dot(coef, v)
            cum += v
            now += dt
            busy += dt
            num_steps += 1
            done_prefill: list[_Req] = []
            for i, cnt in plan.chunks:
                r = reqs[i]
                own, cached_attn = basis.chunk_split(cnt, r.done, r.cached)
                uncached_s[r.rid] += coef[PREFILL] * own
                read = basis.cached_read(r.cached)
                cached_attn_s[r.rid] += coef[PREFILL] * cached_attn + coef[MEMORY] * read
                r.done += cnt
                if r.done >= r.prompt_len:
                    done_prefill.append(r)
            if done_prefill:
                gone = {id(r) for r in done_prefill}
                eng.prefilling_list = [r for r in reqs if id(r) not in gone]
            if plan.decode:
                tick += 1
            finished_now: list[int] = []
            for r in done_prefill:
                first[r.rid] = now + request_s + per_running_s * in_system[r.rid]
                if first_b is not None:
                    first_b[r.rid] = cum
                if r.out_len <= 1:
                    finished_now.append(r.rid)
                else:
                    entry_ctx = r.prompt_len + 1
                    dec_entry[r.rid] = (entry_ctx, tick)
                    dec_offset += entry_ctx - tick
                    eng.num_decoding += 1
                    heapq.heappush(dec_heap, (tick + r.out_len - 1, r.rid))
            if finished_now:
                finish(finished_now)
        finished: list[int] = []
        while dec_heap and dec_heap[0][0] <= tick:
            _, rid = heapq.heappop(dec_heap)
            c0, t0 = dec_entry.pop(rid)
            dec_offset -= c0 - t0
            eng.num_decoding -= 1
            finished.append(rid)
        if finished:
            finish(finished)

    admitted = np.zeros(n, dtype=bool)
    admitted[np.isfinite(end)] = True
    hits = np.array(eng.hits, dtype=np.int64)
    hits[~admitted] = 0
    start[~admitted] = np.nan
    first[~admitted] = np.nan
    return ReplayTimes(
        arrival_s=arrival,
        start_s=start,
        first_token_s=first,
        end_s=end,
        cached_tokens=hits,
        prompt_tokens=np.array([p.prompt.num_tokens for p in pairs], dtype=np.int64),
        output_tokens=np.asarray(output_tokens, dtype=np.int64),
        admitted=admitted,
        uncached_prefill_s=uncached_s,
        cached_attention_s=cached_attn_s,
        in_system=in_system,
        num_steps=num_steps,
        busy_s=busy,
        arrival_basis=arr_b,
        first_basis=first_b,
        end_basis=end_b,
    )


def _steps_to_reach(gap_s: float, a: float, b: float) -> int:
    """Smallest ``k >= 1`` with ``k a + b k (k - 1) / 2 >= gap_s`` (step ``j`` takes
    ``a + b j`` seconds)."""
    if gap_s <= 0:
        return 1
    if b <= 1e-18:
        return max(1, math.ceil(gap_s / a)) if a > 0 else 1 << 62
    # b/2 k^2 + (a - b/2) k - gap = 0
    half = b / 2.0
    lin = a - half
    k = (-lin + math.sqrt(lin * lin + 4 * half * gap_s)) / (2 * half)
    return max(1, math.ceil(k - 1e-9))
