"""One benchmark from start to finish: the same pre-generated requests and schedule
against every endpoint, for every load step and repeat.

Side by side means one of:

- ``SEQUENTIAL`` (default): endpoints one after another, each with its cache put in
  the requested state first (cold: reset through its adapter), so no endpoint runs
  while another is measured and none starts warm from an earlier run.
- ``CONCURRENT``: every endpoint at once, each request sent to all of them at the same
  intended time (faster; endpoints on one machine then compete for it).

For each run: prepare the endpoints (engine, model, cache state, counters before),
build each request's bytes (``model``, ``max_tokens``, ``stream`` with
``stream_options.include_usage``, optional ``ignore_eos`` and salt), send the
schedule (:mod:`.client.execute`), read the engine's figures back (:mod:`.scrape`), check
structured answers (:mod:`.validate`) and summarise (:mod:`.results.metrics`). Synchronous at
the top: each network phase runs its own event loop, so shards can be forked with no
loop running.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np
import orjson

from kvroute import __version__
from kvroute.bench import scrape
from kvroute.bench.client.execute import Interrupted, Job, ShardPlan, quiet_gc
from kvroute.bench.client.send import Prepared, Timeouts
from kvroute.bench.client.shards import chain_roots, run_sharded, split
from kvroute.bench.results.metrics import stat, summarize
from kvroute.bench.results.record import RequestRecord
from kvroute.bench.results.result import (
    SCHEMA,
    BenchResult,
    EndpointInfo,
    LoadInfo,
    Run,
    WorkloadInfo,
)
from kvroute.bench.run_options import BenchEndpoint, RunOptions, SideBySide
from kvroute.bench.schedule import (
    ClosedLoop,
    Load,
    OpenLoop,
    Schedule,
    Slot,
    build_schedule,
)
from kvroute.bench.validate import check_record
from kvroute.bench.workloads.base import Api, BenchRequest, StructuredKind
from kvroute.errors import UsageError
from kvroute.http.client import Origin, UpstreamRequest

Progress = Callable[[str], None]


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_bench`; ``result`` holds what completed (see
    :attr:`BenchResult.interrupted`). Still a KeyboardInterrupt for callers that only
    need to stop."""

    def __init__(self, result: BenchResult) -> None:
        super().__init__(result)
        self.result = result


_START_MARGIN_S = 0.02
"""From every shard ready (connections open) to the first intended send."""


def load_info(load: Load) -> LoadInfo:
    if isinstance(load, OpenLoop):
        return LoadInfo(
            "open",
            load.label,
            rate_per_s=load.rate_per_s,
            arrival=load.arrival.value,
            burstiness=load.burstiness,
            ramp_up_s=load.ramp_up_s,
        )
    if isinstance(load, ClosedLoop):
        return LoadInfo("closed", load.label, concurrency=load.concurrency, think_s=load.think_s)
    return LoadInfo("trace", load.label)


def workload_info(
    name: str,
    params: dict[str, str],
    seed: int,
    tokenizer: str,
    requests: Sequence[BenchRequest],
    ideal_overlap: float | None = None,
) -> WorkloadInfo:
    return WorkloadInfo(
        name=name,
        params=params,
        seed=seed,
        num_requests=len(requests),
        tokenizer=tokenizer,
        prompt_tokens=stat(float(r.prompt_tokens) for r in requests),
        max_tokens=stat(float(r.max_tokens) for r in requests),
        num_sessions=len({r.session_id for r in requests if r.session_id is not None}),
        num_structured=sum(1 for r in requests if r.structured is not StructuredKind.NONE),
        ideal_overlap=ideal_overlap,
    )


def request_body(
    req: BenchRequest, model: str | None, options: RunOptions, salt: str | None
) -> bytes:
    """The JSON body one request is sent with."""
    body: dict[str, Any] = dict(req.body)
    if salt is not None:
        body = _salted(body, salt)
    body["model"] = model or "default"
    body["max_tokens"] = req.max_tokens
    if options.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if options.ignore_eos:
        body["ignore_eos"] = True
    if options.temperature is not None and "temperature" not in body:
        body["temperature"] = options.temperature
    return orjson.dumps(body)


def request_headers(api_key: str | None) -> tuple[tuple[str, str], ...]:
    """The headers every request is sent with (a JSON body; an SSE answer welcome)."""
    headers = (("content-type", "application/json"), ("accept", "text/event-stream"))
    return headers + ((("authorization", f"Bearer {api_key}"),) if api_key else ())


def _salted(body: dict[str, Any], salt: str) -> dict[str, Any]:
    """``salt`` in front of the prompt's first text (token-id prompts stay as they are)."""
    if "messages" in body:
        messages = [dict(m) for m in body["messages"]]
        if messages and isinstance(messages[0].get("content"), str):
            messages[0]["content"] = salt + messages[0]["content"]
        return {**body, "messages": messages}
    if isinstance(body.get("prompt"), str):
        return {**body, "prompt": salt + body["prompt"]}
    return body


def run_bench(
    requests: Sequence[BenchRequest],
    workload: WorkloadInfo,
    endpoints: Sequence[BenchEndpoint],
    options: RunOptions,
    *,
    progress: Progress | None = None,
) -> BenchResult:
    """Run every step and repeat against every endpoint; returns a result whatever the
    endpoints do (faults are in the records). On Ctrl-C raises :class:`BenchInterrupted`
    with the runs completed so far and the one cut short."""
    if not endpoints:
        raise UsageError("no endpoint to benchmark", hint="pass --endpoint name=http://host:port")
    if len({e.name for e in endpoints}) != len(endpoints):
        raise UsageError("endpoint names must be unique")
    if any(r.index != i for i, r in enumerate(requests)):
        raise UsageError("requests must be numbered 0..n-1 in order")
    started = time.perf_counter()
    runs, interrupted = _run_steps(requests, endpoints, options, progress)
    result = BenchResult(
        schema=SCHEMA,
        created_at_unix_s=time.time(),
        kvroute_version=__version__,
        workload=workload,
        options=options.describe(),
        side_by_side=options.side_by_side.value,
        runs=runs,
        elapsed_s=time.perf_counter() - started,
        interrupted=interrupted,
    )
    if interrupted:
        raise BenchInterrupted(result)
    return result


def _run_steps(
    requests: Sequence[BenchRequest],
    endpoints: Sequence[BenchEndpoint],
    options: RunOptions,
    progress: Progress | None,
) -> tuple[list[Run], bool]:
    """Every step, repeat and endpoint group in order; the runs, and whether Ctrl-C
    stopped them (the cut run is included, later ones are not)."""
    runs: list[Run] = []
    groups = (
        [[e] for e in endpoints]
        if options.side_by_side is SideBySide.SEQUENTIAL
        else [list(endpoints)]
    )
    try:
        for step, load in enumerate(options.loads):
            for repeat in range(options.repeats):
                schedule = build_schedule(
                    requests,
                    load,
                    np.random.default_rng([options.seed, step, repeat]),
                    cancel=options.cancel,
                )
                for group in groups:
                    if progress is not None:
                        names = ", ".join(e.name for e in group)
                        progress(
                            f"{names}: {load.label}"
                            + (f" (repeat {repeat + 1})" if options.repeats > 1 else "")
                        )
                    group_runs = _run_group(requests, schedule, group, options, step, repeat)
                    runs += group_runs
                    if any(r.interrupted for r in group_runs):
                        return runs, True
    except KeyboardInterrupt:  # between sends: preparing a run, reading counters back
        return runs, True
    return runs, False


def _run_group(
    requests: Sequence[BenchRequest],
    schedule: Schedule,
    endpoints: Sequence[BenchEndpoint],
    options: RunOptions,
    step: int,
    repeat: int,
) -> list[Run]:
    states = asyncio.run(_prepare(endpoints, options.cache))
    jobs = []
    for endpoint, state in zip(endpoints, states, strict=True):
        salt = (
            f"[run {secrets.token_hex(6)}] " if options.cache is scrape.CacheMode.SALTED else None
        )
        if salt is not None and any(
            r.api is Api.COMPLETIONS and not isinstance(r.body.get("prompt"), str) for r in requests
        ):
            state.notes.append("token-id prompts cannot be salted: they are sent as they are")
        base_url = scrape.root_url(endpoint.url)
        origin, headers = Origin.parse(base_url), request_headers(endpoint.api_key)
        prepared = {
            s.request_index: Prepared(
                index=s.request_index,
                payload=origin.encode(
                    UpstreamRequest(
                        "POST",
                        requests[s.request_index].api.path,
                        headers,
                        request_body(requests[s.request_index], state.model, options, salt),
                    )
                ),
                keep_text=requests[s.request_index].structured is not StructuredKind.NONE,
                cancel_after_chunks=s.cancel_after_chunks,
            )
            for s in schedule.slots
        }
        jobs.append((base_url, prepared))
    started_unix = time.time()
    try:
        per_endpoint, interrupted = _execute(requests, schedule, jobs, options), False
    except Interrupted as exc:
        per_endpoint, interrupted = exc.records, True
    try:
        asyncio.run(_finish(endpoints, states, per_endpoint))
    except KeyboardInterrupt:  # Ctrl-C again: keep the records without the engine's counters
        interrupted = True
        for state in states:
            state.delta = None
            state.notes.append("interrupted before the engine's counters were read back")
    runs = []
    for endpoint, state, records in zip(endpoints, states, per_endpoint, strict=True):
        for rec in records:
            req = requests[rec.index]
            check_record(rec, req.structured, req.schema)
        info = EndpointInfo(
            endpoint.name,
            endpoint.url,
            state.engine,
            state.model,
            state.cache_state.value,
            state.notes,
            endpoint.threads,
            list(endpoint.cpus) or None,
        )
        summary = summarize(records, slo=options.slo, engine_cache=state.delta)
        runs.append(
            Run(
                info,
                step,
                repeat,
                load_info(schedule.load),
                started_unix,
                summary,
                records,
                interrupted,
            )
        )
    return runs


def _execute(
    requests: Sequence[BenchRequest],
    schedule: Schedule,
    jobs: Sequence[tuple[str, dict[int, Prepared]]],
    options: RunOptions,
) -> list[list[RequestRecord]]:
    depends = {r.index: r.depends_on for r in requests if r.depends_on is not None}
    thinks = {r.index: r.think_s for r in requests if r.depends_on is not None}
    closed = schedule.load if isinstance(schedule.load, ClosedLoop) else None
    num_shards = max(
        1,
        min(options.workers, closed.concurrency if closed else options.workers, len(requests) or 1),
    )
    shards = split(schedule.slots, chain_roots(len(requests), depends), num_shards)
    with quiet_gc():
        try:
            return _send_shards(jobs, shards, depends, thinks, closed, num_shards, options)
        except Interrupted as exc:
            raise Interrupted([sorted(r, key=lambda r: r.index) for r in exc.records]) from None


def _send_shards(
    jobs: Sequence[tuple[str, dict[int, Prepared]]],
    shards: Sequence[tuple[Slot, ...]],
    depends: dict[int, int],
    thinks: dict[int, float],
    closed: ClosedLoop | None,
    num_shards: int,
    options: RunOptions,
) -> list[list[RequestRecord]]:
    timeouts = Timeouts(options.first_token_timeout_s, options.timeout_s)
    plans, jobs_by_shard = [], []
    for k, slots in enumerate(shards):
        users = None
        if closed is not None:
            users = closed.concurrency // num_shards + (
                1 if k < closed.concurrency % num_shards else 0
            )
        prewarm = options.prewarm if options.prewarm is not None else (users or 0)
        indices = {s.request_index for s in slots}
        jobs_by_shard.append(
            [Job(t, {i: p for i, p in prepared.items() if i in indices}) for t, prepared in jobs]
        )
        plans.append(
            ShardPlan(
                slots=slots,
                depends_on={i: d for i, d in depends.items() if i in indices},
                follow_think_s={i: v for i, v in thinks.items() if i in indices},
                users=users,
                max_duration_s=options.max_duration_s,
                timeouts=timeouts,
                max_connections=options.max_connections,
                prewarm=prewarm,
                spare=options.spare_connections if closed is None else 0,
                spin_s=options.dispatch_spin_s,
            )
        )
    results = run_sharded(jobs_by_shard, plans, margin_s=_START_MARGIN_S)
    merged: list[list[RequestRecord]] = []
    for j in range(len(jobs)):
        records = [rec for shard in results for rec in shard[j]]
        merged.append(sorted(records, key=lambda r: r.index))
    return merged


async def _prepare(
    endpoints: Sequence[BenchEndpoint], mode: scrape.CacheMode
) -> list[scrape.EndpointState]:
    async with httpx.AsyncClient() as client:
        return list(
            await asyncio.gather(
                *(
                    scrape.prepare(client, e.url, engine=e.engine, model=e.model, mode=mode)
                    for e in endpoints
                )
            )
        )


async def _finish(
    endpoints: Sequence[BenchEndpoint],
    states: Sequence[scrape.EndpointState],
    records: Sequence[Sequence[RequestRecord]],
) -> None:
    async with httpx.AsyncClient() as client:
        await asyncio.gather(
            *(
                scrape.finish(client, e.url, s, r)
                for e, s, r in zip(endpoints, states, records, strict=True)
            )
        )
