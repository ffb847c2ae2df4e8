"""Sending the trace's requests to an engine over HTTP, on the trace's schedule.

Each send goes through a :data:`Post` (:func:`http_post` is the real one), so the schedule
logic in :func:`serve` runs the same against an engine or a test's stand-in.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

from kvroute.engines.http import as_mapping, request
from kvroute.errors import EngineError
from kvroute.types import JSONValue
from kvroute.validate.result import Answer, CompletionPath

Clock = Callable[[], float]

Post = Callable[[CompletionPath, dict[str, JSONValue]], Awaitable[Mapping[str, Any]]]
"""Sends one request body and returns the decoded answer; raises ``EngineError``."""


def http_post(client: httpx.AsyncClient, base_url: str, *, timeout_s: float) -> Post:
    """A :data:`Post` that sends to ``base_url`` through ``client``."""
    root = base_url.rstrip("/")

    async def post(endpoint: CompletionPath, body: dict[str, JSONValue]) -> Mapping[str, Any]:
        url = f"{root}{endpoint.value}"
        response = await request(client, "POST", url, json_body=body, timeout_s=timeout_s)
        try:
            decoded = response.json()
        except ValueError:
            raise EngineError(f"POST {url} did not answer JSON: {response.text[:200]!r}") from None
        return as_mapping(decoded, url)

    return post


async def serve(
    work: Sequence[tuple[CompletionPath, dict[str, JSONValue]]],
    post: Post,
    *,
    arrivals_s: Sequence[float] | None,
    concurrency: int,
    send_gap_s: float = 0.0,
    clock: Clock = time.monotonic,
) -> list[Answer]:
    """Send every request: at ``arrivals_s`` (seconds from the start) when given, else in a
    closed loop of ``concurrency`` clients taking requests in order; any two sends at least
    ``send_gap_s`` apart, in the order they were due (trace order among equal times). The
    first failure cancels the rest and is raised as itself, not as an exception group."""
    answers: list[Answer | None] = [None] * len(work)
    t0 = clock()
    gate = asyncio.Lock()  # FIFO: sends leave in the order they reached it
    last_send = [-math.inf]

    sent_at: dict[int, float] = {}

    async def send(i: int) -> None:
        async with gate:
            wait = last_send[0] + send_gap_s - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            last_send[0] = clock()
            sent_at[i] = last_send[0] - t0
        body = await post(*work[i])
        answers[i] = Answer(sent_at[i], clock() - t0, body)

    async def dispatch(group: asyncio.TaskGroup, times_s: Sequence[float]) -> None:
        # One timer for all arrivals: timers due at the same instant may fire in any order,
        # tasks created one after another reach the gate in creation order.
        for i in sorted(range(len(times_s)), key=lambda k: (times_s[k], k)):
            delay = times_s[i] - (clock() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(send(i))

    queue = iter(range(len(work)))

    async def client() -> None:
        for i in queue:  # shared: each client takes the next request in trace order
            await send(i)

    try:
        async with asyncio.TaskGroup() as group:
            if arrivals_s is not None:
                group.create_task(dispatch(group, arrivals_s))
            else:
                for _ in range(concurrency):
                    group.create_task(client())
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [a for a in answers if a is not None]


async def order_slots(post: Post, model: str, num_slots: int) -> None:
    """Put llama.cpp's slots in a fresh server's order, the model's initial state.

    Without a slot sharing enough of a prompt, llama.cpp takes the one used longest ago,
    the last slot among never-used ones; an erase empties slots but keeps when each was
    last used, so which empty slot a cleared server takes depends on its past. One token
    through each slot, last to first, before the erase makes it the last slot first, as
    on a fresh server, so slot numbers (which break ties) agree with the model's.
    """
    for slot in reversed(range(num_slots)):
        body: dict[str, JSONValue] = {
            "model": model,
            "prompt": "0",
            "max_tokens": 1,
            "id_slot": slot,
        }
        await post(CompletionPath.COMPLETIONS, body)
