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
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kvroute.cache.base import Admission, AdmitStatus, CacheSeq, PrefixCache
from kvroute.cache.replay.loop import WaitingView
from kvroute.cache.replay.seq import SeqPair
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
    preemptions: npt.NDArray[np.int64]
    """Times each request was preempted (vLLM, when KV blocks ran out)."""
    arrival_basis: FloatArray | None
    first_basis: FloatArray | None
    end_basis: FloatArray | None


class _Req:
    """A started request. ``prompt_len`` and ``out_len`` are what its current run
    computes and emits (after a preemption: prompt plus tokens generated so far, and the
    tokens still to come); ``entry`` is the tick it began decoding at (-1: prefilling)."""

    __slots__ = (
        "cached",
        "done",
        "entry",
        "epoch",
        "next_grow",
        "out_len",
        "prompt_len",
        "rid",
    )

    def __init__(self, rid: int, prompt_len: int, out_len: int) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.out_len = out_len
        self.cached = 0
        self.done = 0
        self.entry = -1
        self.epoch = 0
        """Bumped at each preemption: heap entries of an earlier run are stale."""
        self.next_grow = 0

    @property
    def remaining_tokens(self) -> int:
        return self.prompt_len - self.done

    def context(self, tick: int) -> int:
        """Tokens a decoding request attends over (and needs slots for) at step ``tick``."""
        return self.prompt_len + 1 + tick - self.entry


@runtime_checkable
class StepMemory(Protocol):
    """A cache model that takes memory step by step
    (:class:`~kvroute.cache.models.vllm.VllmPrefixCache`)."""

    def pin_steps(
        self, request_id: int, seq: CacheSeq, final: CacheSeq, max_new_tokens: int
    ) -> Admission: ...

    def grow(self, request_id: int, num_tokens: int) -> bool: ...

    def room_tokens(self, request_id: int) -> int: ...

    def free_blocks(self) -> int: ...

    def preempt(self, request_id: int, num_computed: int) -> None: ...


@runtime_checkable
class BatchInsert(Protocol):
    """A cache model whose prompts enter the cache at the end of their prefill batch
    (:class:`~kvroute.cache.models.sglang.SglangPrefixCache`)."""

    def pin_deferred(self, request_id: int, seq: CacheSeq, final_tokens: int) -> Admission: ...

    def prefilled(self, request_id: int, seq: CacheSeq) -> None: ...


class _Engine:
    """The engine's request states: the :class:`~kvroute.predict.base.EngineView`.

    Decoding requests are kept implicitly: a request that began decoding at tick ``e``
    with context ``c`` has context ``c + (tick - e)`` (``dec_offset`` sums ``c - e``);
    ``dec_heap`` orders them by the tick they finish at. With step memory,
    ``grow_heap`` orders them by the tick they next need a block at, so a step takes
    memory only for the requests that cross a block boundary."""

    def __init__(self, model: PrefixCache, pairs: Sequence[SeqPair], outputs: Sequence[int]):
        self.model = model
        self.stepper: StepMemory | None = model if isinstance(model, StepMemory) else None
        self.inserter: BatchInsert | None = model if isinstance(model, BatchInsert) else None
        self.pairs = pairs
        self.outputs = outputs
        self.waiting: deque[int] = deque()
        self.view = WaitingView(self.waiting, dict(enumerate(pairs)))
        self.prefilling_list: list[_Req] = []
        self.running: dict[int, _Req] = {}
        """Started requests in start order (vLLM's ``running``)."""
        self.resumed: dict[int, _Req] = {}
        """Preempted requests waiting to start again."""
        self.num_decoding = 0
        self.tick = 0
        self.dec_heap: list[tuple[int, int, int]] = []
        self.dec_offset = 0
        self.grow_heap: list[tuple[int, int, int]] = []
        self.blocked = False
        self.num_released = 0
        self.started: list[_Req] = []
        self.rejected: list[int] = []
        self.hits = [-1] * len(pairs)
        self.preemptions = [0] * len(pairs)
        self.preempted = False
        """Whether the step being planned preempted a request."""

    @property
    def prefilling(self) -> Sequence[Prefilling]:
        return self.prefilling_list

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def admit_next(self, max_new_tokens: int | None = None) -> Prefilling | None:
        while self.waiting and not self.blocked:
            order = self.model.schedule_order(self.view, num_released=self.num_released)
            pos = order[0]
            rid = self.waiting[pos]
            pair = self.pairs[rid]
            req = self.resumed.get(rid)
            seq = pair.prompt if req is None else _prefix(pair, req.prompt_len)
            if self.stepper is not None:
                budget = seq.num_tokens if max_new_tokens is None else max_new_tokens
                adm = self.stepper.pin_steps(rid, seq, pair.final, budget)
            elif self.inserter is not None:
                adm = self.inserter.pin_deferred(rid, seq, pair.final.num_tokens)
            else:
                adm = self.model.pin(rid, seq, pair.final.num_tokens)
            if adm.status is AdmitStatus.NO_ROOM:
                self.blocked = True
                return None
            del self.waiting[pos]
            self.num_released = 0
            if adm.status is AdmitStatus.TOO_LARGE:
                self.rejected.append(rid)
                continue
            if req is None:
                req = _Req(rid, pair.prompt.num_tokens, self.outputs[rid])
            else:
                del self.resumed[rid]
            req.cached = req.done = adm.cached_tokens
            if self.hits[rid] < 0:  # vLLM reports the hit of a request's first start
                self.hits[rid] = adm.cached_tokens
            self.prefilling_list.append(req)
            self.running[rid] = req
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

    # -- decoding requests ------------------------------------------------------------

    def start_decoding(self, req: _Req) -> None:
        req.entry = self.tick
        self.dec_offset += req.prompt_len + 1 - self.tick
        self.num_decoding += 1
        heapq.heappush(self.dec_heap, (self.tick + req.out_len - 1, req.epoch, req.rid))
        if self.stepper is not None:
            self._push_grow(req)

    def _push_grow(self, req: _Req) -> None:
        assert self.stepper is not None
        # the first tick whose context exceeds the slots held
        req.next_grow = req.entry + self.stepper.room_tokens(req.rid) - req.prompt_len
        heapq.heappush(self.grow_heap, (req.next_grow, req.epoch, req.rid))

    def _live(self, entry: tuple[int, int, int]) -> _Req | None:
        req = self.running.get(entry[2])
        if req is None or req.epoch != entry[1] or req.entry < 0:
            return None
        return req

    def next_finish(self) -> int | None:
        """The tick the next decoding request finishes at (stale heap entries dropped)."""
        heap = self.dec_heap
        while heap and self._live(heap[0]) is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_finished(self) -> list[int]:
        """Decoding requests whose last token the step just taken sampled."""
        done: list[int] = []
        heap = self.dec_heap
        while heap and heap[0][0] <= self.tick:
            entry = heapq.heappop(heap)
            req = self._live(entry)
            if req is None:
                continue
            self.dec_offset -= req.prompt_len + 1 - req.entry
            self.num_decoding -= 1
            req.entry = -1
            del self.running[req.rid]
            done.append(req.rid)
        return done

    # -- step memory ------------------------------------------------------------------

    def reserve(self, chunks: Sequence[tuple[int, int]]) -> tuple[Sequence[tuple[int, int]], bool]:
        st = self.stepper
        if st is None:
            return chunks, False
        tick = self.tick
        unit = self.model.unit_tokens
        due: list[_Req] = []
        heap = self.grow_heap
        while heap and heap[0][0] <= tick:
            entry = heapq.heappop(heap)
            req = self._live(entry)
            if req is not None and req.next_grow == entry[0]:
                due.append(req)
        pre = self.prefilling_list
        need = len(due)
        for i, cnt in chunks:
            r = pre[i]
            need += max(0, -(-(r.done + cnt - st.room_tokens(r.rid)) // unit))
        if need <= st.free_blocks():
            for i, cnt in chunks:
                r = pre[i]
                st.grow(r.rid, r.done + cnt)
            for req in due:
                st.grow(req.rid, req.context(tick))
                self._push_grow(req)
            return chunks, False
        # Short: vLLM's running loop, in start order, preempting the newest request
        # (``self.running.pop()``) until the one at hand fits, or it is the newest itself.
        chunk_of = {pre[i].rid: cnt for i, cnt in chunks}
        preempted = False
        for req in list(self.running.values()):
            if req.rid not in self.running:
                break  # preempted below: it and everything after it are gone
            if req.entry >= 0:
                tokens = req.context(tick)
                if tokens <= st.room_tokens(req.rid):
                    continue
            elif req.rid in chunk_of:
                tokens = req.done + chunk_of[req.rid]
            else:
                continue
            while not st.grow(req.rid, tokens):
                victim = next(reversed(self.running.values()))
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            else:
                if req.entry >= 0:
                    self._push_grow(req)
        kept = len(self.prefilling_list)
        self.preempted = preempted
        return [(i, cnt) for i, cnt in chunks if i < kept], preempted

    def _preempt(self, req: _Req) -> None:
        """Recompute preemption: free its memory, back to the head of the queue."""
        assert self.stepper is not None
        del self.running[req.rid]
        if req.entry >= 0:
            ctx = req.context(self.tick)  # its prompt and every token generated so far
            self.stepper.preempt(req.rid, ctx - 1)
            self.dec_offset -= req.prompt_len + 1 - req.entry
            self.num_decoding -= 1
            req.out_len -= ctx - req.prompt_len
            req.prompt_len = ctx
            req.entry = -1
        else:
            self.stepper.preempt(req.rid, req.done)
            self.prefilling_list.remove(req)
        req.epoch += 1
        req.done = req.cached = 0
        self.preemptions[req.rid] += 1
        self.resumed[req.rid] = req
        self.waiting.appendleft(req.rid)
        self.blocked = False

    def grow_decodes(self, steps: int) -> int:
        """Memory for ``steps`` more decode-only steps after this one, taken block by block
        in the order requests cross block boundaries; the steps that fit (at least 1:
        this step's memory was reserved when it was planned)."""
        st = self.stepper
        if st is None:
            return steps
        heap = self.grow_heap
        last = self.tick + steps - 1
        while heap and heap[0][0] <= last:
            entry = heap[0]
            req = self._live(entry)
            if req is None or req.next_grow != entry[0]:
                heapq.heappop(heap)
                continue
            if not st.grow(req.rid, req.context(entry[0])):
                return entry[0] - self.tick  # that step preempts: it is planned alone
            heapq.heappop(heap)
            self._push_grow(req)
        return steps


def _prefix(pair: SeqPair, num_tokens: int) -> CacheSeq:
    """The first ``num_tokens`` tokens of a request's final sequence, as a prompt: what
    a preempted request computes again when it returns."""
    prompt, final = pair.prompt, pair.final
    if num_tokens <= prompt.num_tokens:
        return prompt
    u = prompt.unit_tokens
    extra = num_tokens - prompt.num_tokens
    if prompt.num_keys * u > prompt.num_tokens:  # a keyed partial last block (hash-only)
        n_keys = prompt.num_keys + extra // u
        n_units = prompt.num_units + -(-extra // u)
    else:
        n_keys = num_tokens // u
        n_units = -(-num_tokens // u)
    return CacheSeq(final.keys[: min(n_keys, final.num_keys)], num_tokens, n_units, u)


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
    :mod:`kvroute.cache.replay.seq`) on a fresh ``model`` with ``scheduler``'s batch formation.
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
    busy = 0.0
    num_steps = 0

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
        eng.preempted = False
        plan = scheduler.plan(eng)
        for req in eng.started:
            if math.isnan(start[req.rid]):
                start[req.rid] = now
        eng.started.clear()
        if not plan.chunks and not plan.decode:
            if eng.waiting and eng.blocked and not eng.prefilling_list and eng.num_decoding == 0:
                eng.reject_head()
                continue
            if eng.preempted:
                continue  # every running request was preempted: the next step restarts them
            if not closed and pos < n:
                now = max(now, times[order[pos]])
                continue
            break
        num_dec = eng.num_decoding
        tick = eng.tick
        dec_ctx = eng.dec_offset + num_dec * tick
        if not plan.chunks and not eng.prefilling_list and (not eng.waiting or eng.blocked):
            # Decode-only until the batch changes: sum k steps in closed form.
            v0 = np.array(basis.vector(StepShape(num_decodes=num_dec, decode_ctx=dec_ctx)))
            v1 = np.array(
                basis.vector(StepShape(num_decodes=num_dec, decode_ctx=dec_ctx + num_dec))
            )
            slope = v1 - v0
            a = dot(coef, tuple(v0))
            b = dot(coef, tuple(slope))
            next_end = eng.next_finish()
            assert next_end is not None
            k = next_end - tick
            if not closed and pos < n:
                k = min(k, _steps_to_reach(times[order[pos]] - now, a, b))
            k = eng.grow_decodes(max(k, 1))
            tri = k * (k - 1) / 2.0
            dt = k * a + b * tri
            cum += k * v0 + slope * tri
            now += dt
            busy += dt
            eng.tick += k
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
                if eng.inserter is not None:  # the batch is computed: its prompts are cached
                    for r in done_prefill:
                        eng.inserter.prefilled(r.rid, pairs[r.rid].prompt)
                gone = {id(r) for r in done_prefill}
                eng.prefilling_list = [r for r in reqs if id(r) not in gone]
            if plan.decode:
                eng.tick += 1
            finished_now: list[int] = []
            for r in done_prefill:
                if math.isnan(first[r.rid]):  # a preempted request's return emits no first token
                    first[r.rid] = now + request_s + per_running_s * in_system[r.rid]
                    if first_b is not None:
                        first_b[r.rid] = cum
                if r.out_len <= 1:
                    del eng.running[r.rid]
                    finished_now.append(r.rid)
                else:
                    eng.start_decoding(r)
            if finished_now:
                finish(finished_now)
        finished = eng.pop_finished()
        if finished:
            finish(finished)

    admitted = np.zeros(n, dtype=bool)
    admitted[np.isfinite(end)] = True
    hits = np.maximum(np.array(eng.hits, dtype=np.int64), 0)
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
        preemptions=np.array(eng.preemptions, dtype=np.int64),
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
