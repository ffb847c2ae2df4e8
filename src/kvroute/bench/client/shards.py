"""Shards: a schedule split by dependency chain, each sent by its own process.

With ``workers > 1`` every shard runs :func:`~.execute.run_shard` in a forked child;
all of them share one ``t0`` on the system-wide monotonic clock, taken once every child
has its connections open. Ctrl-C reaches the children too (the parent passes it on,
in case only the parent got it); each reports what it recorded, and
:class:`~.execute.Interrupted` carries the lot.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from kvroute.bench.client.execute import Interrupted, Job, ShardPlan, clock, run_shard
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.bench.schedule import Slot

_REPORT_WAIT_S = 10.0
"""After Ctrl-C, how long shard processes are given to send what they recorded."""


def chain_roots(num: int, depends_on: dict[int, int]) -> list[int]:
    """The first request of each request's dependency chain (itself when it has none)."""
    roots = list(range(num))
    for i in range(num):
        dep = depends_on.get(i)
        if dep is not None:
            roots[i] = roots[dep]  # dependencies point backwards: the root is known
    return roots


def split(slots: Sequence[Slot], roots: Sequence[int], num_shards: int) -> list[tuple[Slot, ...]]:
    """Slots by shard: a whole dependency chain goes to one shard; order is kept."""
    shards: list[list[Slot]] = [[] for _ in range(num_shards)]
    for slot in slots:
        shards[roots[slot.request_index] % num_shards].append(slot)
    return [tuple(s) for s in shards]


def run_sharded(
    jobs_by_shard: Sequence[Sequence[Job]], plans: Sequence[ShardPlan], *, margin_s: float = 0.02
) -> list[list[list[RequestRecord]]]:
    """Run shards, in forked processes when there is more than one; one result per shard.

    Each child opens its connections, says it is ready, and waits for the common
    ``t0``, which is taken only once every shard is ready: a slow fork on a busy
    machine delays the start, never the schedule. On Ctrl-C every child is stopped
    and asked for what it recorded; :class:`Interrupted` then carries each job's
    records from every shard (in shard order, not sorted).
    """
    if len(plans) == 1:
        return [run_shard(jobs_by_shard[0], plans[0], margin_s=margin_s)]
    ctx = multiprocessing.get_context("fork")
    links: list[Connection] = []
    procs: list[multiprocessing.process.BaseProcess] = []
    got: dict[int, list[list[RequestRecord]]] = {}
    num_started = 0  # children sent t0: they may have sent requests
    try:
        for jobs, plan in zip(jobs_by_shard, plans, strict=True):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(child, jobs, plan), daemon=True)
            proc.start()
            child.close()
            links.append(parent)
            procs.append(proc)
        for link in links:
            _expect(link, "ready")
        t0 = clock() + margin_s
        for link in links:
            link.send(t0)
            num_started += 1
        for k, link in enumerate(links):
            got[k] = _expect(link, "records")
        return [got[k] for k in range(len(links))]
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):  # a child stopped first: it is the next one read
            got[len(got)] = exc.records
        num_jobs = len(jobs_by_shard[0])
        per_shard = _collect_interrupted(links, procs, plans, num_jobs, got, num_started)
        raise Interrupted(
            [[rec for shard in per_shard for rec in shard[j]] for j in range(num_jobs)]
        ) from None
    finally:
        for each in procs:
            each.join(5)
            if each.is_alive():
                each.kill()


def _collect_interrupted(
    links: Sequence[Connection],
    procs: Sequence[multiprocessing.process.BaseProcess],
    plans: Sequence[ShardPlan],
    num_jobs: int,
    got: dict[int, list[list[RequestRecord]]],
    num_started: int,
) -> list[list[list[RequestRecord]]]:
    """After Ctrl-C: every shard's records. A child that started sending is sent SIGINT
    (the terminal's Ctrl-C may have reached only this process) and given
    ``_REPORT_WAIT_S`` to answer; one that never started is stopped. A shard with no
    answer has its requests recorded as cut off (or not sent, if it never started)."""
    for k, proc in enumerate(procs):
        if k in got or proc.pid is None or not proc.is_alive():
            continue
        if k < num_started:
            os.kill(proc.pid, signal.SIGINT)
        else:
            proc.kill()
    until = clock() + _REPORT_WAIT_S
    out = []
    for k, plan in enumerate(plans):
        records = got.get(k)
        if records is None and k < num_started and k < len(links):
            records = _interrupted_report(links[k], until)
        if records is None:
            records = [_unreported(plan, k < num_started) for _ in range(num_jobs)]
        out.append(records)
    return out


def _interrupted_report(link: Connection, until: float) -> list[list[RequestRecord]] | None:
    """What a stopped child sent back, or None when it sent nothing usable in time."""
    try:
        if not link.poll(max(0.0, until - clock())):
            return None
        message = link.recv()
    except (EOFError, OSError):
        return None
    if isinstance(message, Interrupted):
        return message.records
    if isinstance(message, list):  # it had finished
        return message
    return None


def _unreported(plan: ShardPlan, started: bool) -> list[RequestRecord]:
    """A shard's records when its process reported none."""
    records = []
    for slot in plan.slots:
        rec = RequestRecord(index=slot.request_index, scheduled_s=slot.offset_s or 0.0)
        if started:
            rec.fail(ErrorKind.INTERRUPTED, "no record: the shard process did not report", None)
        else:
            rec.outcome = Outcome.NOT_SENT
        records.append(rec)
    return records


def _child(link: Connection, jobs: Sequence[Job], plan: ShardPlan) -> None:
    def start() -> float:
        link.send("ready")
        t0: float = link.recv()
        return t0

    result: object
    try:
        result = run_shard(jobs, plan, start=start)
    except BaseException as exc:  # reported to the parent, which re-raises it
        result = exc
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the report
    try:
        link.send(result)
    finally:
        link.close()


def _expect(link: Connection, what: str) -> Any:
    try:
        message = link.recv()
    except EOFError:
        raise RuntimeError(f"a bench shard process died before sending its {what}") from None
    if isinstance(message, BaseException):
        raise message
    return message
