"""Sending a schedule: the dispatch loop, closed-loop users, dependencies, Ctrl-C.

One shard is one asyncio loop in one process, sending a subset of the schedule to
every endpoint of the step at once (one endpoint in a sequential comparison, all of
them in a concurrent one). Open loop: a dispatcher sleeps until each request's
absolute deadline ``t0 + offset`` and starts it; a request that follows another
(``depends_on``) waits for that one's end plus its think time instead, and is
measured from then. Closed loop: ``users`` coroutines each take the next request of
the shard, send it, wait for its end and a think time, and repeat.

Nothing runs past ``deadline``: later requests are recorded as not sent and requests
in flight are cut off (:class:`~kvroute.bench.results.record.ErrorKind` ``RUN_DEADLINE``).
Ctrl-C (SIGINT) stops a shard the same way, with ``INTERRUPTED`` for the requests cut
off, and :class:`Interrupted` carries what was recorded up to then.

Shards split a schedule by dependency chain (a session stays in one shard) and run in
forked processes when ``workers > 1`` (:mod:`.shards`), all sharing one ``t0`` on the
system-wide monotonic clock.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from kvroute.bench.client.dispatch import Dispatcher
from kvroute.bench.client.send import InFlight, Prepared, Timeouts, begin, send
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.bench.schedule import Slot
from kvroute.http.client import PooledTransport

_CONNECT_TIMEOUT_S = 30.0

clock = time.monotonic
"""The clock every time here is read from: system-wide, so shards in other processes agree."""


@dataclass(frozen=True, slots=True)
class Job:
    """One endpoint's part of a shard: where to send (the base URL requests' paths are
    appended to), and each request's bytes by index."""

    base_url: str
    prepared: dict[int, Prepared]


@dataclass(frozen=True, slots=True)
class ShardPlan:
    slots: tuple[Slot, ...]
    """This shard's slots, in schedule order."""
    depends_on: dict[int, int]
    """request index -> the request whose end it waits for."""
    follow_think_s: dict[int, float]
    """request index -> pause after its dependency ends."""
    users: int | None
    """Closed-loop users in this shard; None for an open loop."""
    max_duration_s: float
    timeouts: Timeouts
    max_connections: int = 1024
    prewarm: int = 0
    spare: int = 0
    """Idle connections kept opening ahead of need (see
    :class:`~kvroute.http.client.PooledTransport`)."""
    spin_s: float = 0.0
    """Open loop: poll for the last ``spin_s`` before each send instead of sleeping
    (sub-millisecond send times for CPU; see :class:`~.dispatch.Dispatcher`)."""
    t0: float = 0.0
    """Set when every shard is ready (:func:`~.shards.run_sharded`); with it ``deadline`` and
    ``timeouts.deadline``."""
    deadline: float = 0.0

    def starting_at(self, t0: float) -> ShardPlan:
        deadline = t0 + self.max_duration_s
        return replace(
            self, t0=t0, deadline=deadline, timeouts=replace(self.timeouts, deadline=deadline)
        )


StartFn = Callable[[], float]
"""Called once a shard is ready to send (connections open); returns the common ``t0``."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run. ``records`` is one list per job (endpoint), as a completed
    run would give: finished requests as they ended, requests cut off marked
    ``ErrorKind.INTERRUPTED``, the rest ``NOT_SENT``. Still a KeyboardInterrupt, so a
    caller that does not look for it stops as on any Ctrl-C."""

    def __init__(self, records: list[list[RequestRecord]]) -> None:
        super().__init__(records)
        self.records = records


class _EndpointRun:
    """One endpoint's records and connections within a shard."""

    def __init__(self, job: Job, plan: ShardPlan, waited_on: set[int]) -> None:
        self.job = job
        self.plan = plan
        self.pool = PooledTransport(
            job.base_url, max_connections=plan.max_connections, spare=plan.spare, clock=clock
        )
        self.records: dict[int, RequestRecord] = {}
        self.finished: set[int] = set()
        """Requests whose record is complete (the rest were cut off if the shard stops)."""
        loop = asyncio.get_running_loop()
        self.ended: dict[int, asyncio.Future[None]] = {i: loop.create_future() for i in waited_on}

    async def send(self, index: int, scheduled_s: float) -> RequestRecord:
        rec = RequestRecord(index=index, scheduled_s=scheduled_s)
        self.records[index] = rec
        if self.plan.t0 + scheduled_s >= self.plan.deadline:
            rec.outcome = Outcome.NOT_SENT
            self._ended(index)
            return rec
        return await self._complete(rec, None)

    def dispatch(self, index: int, scheduled_s: float) -> asyncio.Task[object]:
        """Start ``index`` now: written in this loop step when a connection is idle."""
        plan = self.plan
        rec = RequestRecord(index=index, scheduled_s=scheduled_s)
        self.records[index] = rec
        started = begin(
            self.pool,
            self.job.prepared[index],
            rec,
            clock=clock,
            t0=plan.t0,
            timeouts=plan.timeouts,
        )
        return asyncio.create_task(self._complete(rec, started))

    async def _complete(self, rec: RequestRecord, started: InFlight | None) -> RequestRecord:
        plan = self.plan
        await send(
            self.pool,
            self.job.prepared[rec.index],
            rec,
            clock=clock,
            t0=plan.t0,
            timeouts=plan.timeouts,
            started=started,
        )
        self._ended(rec.index)
        return rec

    def _ended(self, index: int) -> None:
        self.finished.add(index)
        fut = self.ended.get(index)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def cut_off(self) -> None:
        """After Ctrl-C: requests on the wire are cut off, requests never written are
        not sent."""
        now = clock() - self.plan.t0
        for index, rec in self.records.items():
            if index in self.finished:
                continue
            if rec.sent_s is None:
                rec.outcome = Outcome.NOT_SENT
            else:
                rec.fail(ErrorKind.INTERRUPTED, "cut off by Ctrl-C", now)

    def all_records(self) -> list[RequestRecord]:
        """One record per slot, in slot order; slots never reached are not sent."""
        plan = self.plan
        for slot in plan.slots:
            if slot.request_index not in self.records:
                scheduled = slot.offset_s if slot.offset_s is not None else plan.deadline - plan.t0
                self.records[slot.request_index] = RequestRecord(
                    index=slot.request_index, scheduled_s=scheduled, outcome=Outcome.NOT_SENT
                )
        return [self.records[s.request_index] for s in plan.slots]

    async def after_dependency(self, index: int, earliest_s: float) -> None:
        """Send ``index`` once its dependency has ended (or mark it not sent)."""
        plan = self.plan
        dep = plan.depends_on[index]
        fut = self.ended.get(dep)
        if fut is not None:
            try:
                await asyncio.wait_for(asyncio.shield(fut), max(0.0, plan.deadline - clock()))
            except TimeoutError:
                self.records[index] = RequestRecord(
                    index=index, scheduled_s=earliest_s, outcome=Outcome.NOT_SENT
                )
                self.finished.add(index)
                return
        dep_rec = self.records.get(dep)
        dep_end = (
            dep_rec.end_s
            if dep_rec is not None and dep_rec.end_s is not None
            else clock() - plan.t0
        )
        intended = max(earliest_s, dep_end + plan.follow_think_s.get(index, 0.0))
        await _sleep_until(plan.t0 + intended)
        await self.send(index, intended)


async def _sleep_until(at: float) -> None:
    delay = at - clock()
    if delay > 0:
        await asyncio.sleep(delay)


async def _open_loop(runs: list[_EndpointRun], plan: ShardPlan) -> list[asyncio.Task[object]]:
    """Start every slot of an open-loop shard; returns the requests' tasks.

    Independent slots are sent by a :class:`~.dispatch.Dispatcher` from timer callbacks; a slot
    that follows another gets a task that waits for that one's end.
    """
    tasks: list[asyncio.Task[object]] = []
    timed: list[tuple[int, float]] = []
    for slot in plan.slots:
        index, offset = slot.request_index, slot.offset_s or 0.0
        if plan.t0 + offset >= plan.deadline:
            break
        if index in plan.depends_on:
            tasks += [asyncio.create_task(r.after_dependency(index, offset)) for r in runs]
        else:
            timed.append((index, offset))

    def send(index: int, offset: float) -> None:
        tasks.extend(run.dispatch(index, offset) for run in runs)

    await Dispatcher(timed, send, t0=plan.t0, spin_s=plan.spin_s, clock=clock).run()
    return tasks


async def _closed_loop(run: _EndpointRun, plan: ShardPlan) -> None:
    slots = iter(plan.slots)

    async def user() -> None:
        free_at = 0.0
        for slot in slots:
            index = slot.request_index
            intended = free_at + slot.think_s if free_at > 0 else 0.0
            if index in plan.depends_on:
                await run.after_dependency(index, intended)
                rec = run.records[index]
            else:
                await _sleep_until(plan.t0 + intended)
                rec = await run.send(index, max(intended, 0.0))
            if rec.outcome is Outcome.NOT_SENT:
                return
            free_at = rec.end_s if rec.end_s is not None else clock() - plan.t0

    await asyncio.gather(*(user() for _ in range(plan.users or 1)))


async def _shard(jobs: Sequence[Job], plan: ShardPlan, start: StartFn) -> list[list[RequestRecord]]:
    """Send one shard; one list of records per job, in slot order. Raises
    :class:`Interrupted` (with those lists) on Ctrl-C."""
    waited_on = set(plan.depends_on.values())
    runs = [_EndpointRun(job, plan, waited_on) for job in jobs]
    work = asyncio.ensure_future(_send_all(runs, plan, start))
    interrupted = await _until_interrupted(work)
    out = []
    for run in runs:
        if interrupted:
            run.cut_off()
        await run.pool.aclose()
        out.append(run.all_records())
    if interrupted:
        raise Interrupted(out)
    return out


async def _send_all(runs: Sequence[_EndpointRun], plan: ShardPlan, start: StartFn) -> None:
    if plan.prewarm:
        await asyncio.gather(
            *(r.pool.prewarm(plan.prewarm, connect_timeout_s=_CONNECT_TIMEOUT_S) for r in runs)
        )
    plan = plan.starting_at(start())
    for run in runs:
        run.plan = plan
    await _sleep_until(plan.t0)
    if plan.users is None:
        tasks = await _open_loop(list(runs), plan)
        if tasks:
            await asyncio.wait(tasks)
    else:
        await asyncio.gather(*(_closed_loop(r, plan) for r in runs))


async def _until_interrupted(work: asyncio.Future[None]) -> bool:
    """Wait for ``work``; on SIGINT cancel it and every task it started instead. True
    when interrupted. Where SIGINT cannot be caught here (not the main thread) or is
    ignored, just waits. The SIGINT handler in place before is restored on return."""
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()

    def on_sigint() -> None:  # a second SIGINT (terminal and parent) changes nothing
        if not stop.done():
            stop.set_result(None)

    previous = signal.getsignal(signal.SIGINT)
    try:
        if previous in (signal.SIG_IGN, None):
            raise ValueError("SIGINT is ignored")
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (ValueError, RuntimeError, NotImplementedError):
        await work
        return False
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not stop.done():
            work.result()  # re-raises what the shard raised
            return False
        if work.done() and not work.cancelled():
            work.exception()  # retrieved: the Ctrl-C wins
        me = asyncio.current_task()
        while others := [t for t in asyncio.all_tasks() if t is not me and not t.done()]:
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
        return True
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


def run_shard(
    jobs: Sequence[Job],
    plan: ShardPlan,
    *,
    margin_s: float = 0.02,
    start: StartFn | None = None,
) -> list[list[RequestRecord]]:
    """Send one shard in this process, starting ``margin_s`` after it is ready (or at
    the ``t0`` that ``start`` returns); one list of records per job, in the shard's
    slot order. Raises :class:`Interrupted` on Ctrl-C."""
    return asyncio.run(_shard(jobs, plan, start or (lambda: clock() + margin_s)))


@contextmanager
def quiet_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a run, everything allocated before it frozen.

    A collection over the prepared requests (and whatever else the process holds) is
    a pause of tens of milliseconds that would show as dispatch delay; a run is
    bounded and its requests free their objects by reference counting. Enter it
    before taking ``t0``: forked shards inherit the state.
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
