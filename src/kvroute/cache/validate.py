"""Check a cache model against a real engine: serve a trace on it, then predict that same run.

The library behind ``kvroute simulate TRACE --validate URL --engine E``. In order::

    setup     ask the engine what it reports (vLLM: block size and block count from
              cache_config_info; llama.cpp: slots and per-slot context from /props); the
              settings it does not report are given by the caller
    reset     drop the engine's prefix cache so the run starts cold (llama.cpp: slots
              first put in a fresh server's order, see _order_slots), or say it could not
    serve     send each request as the trace has it (chat or completions, max_tokens = its
              output length, temperature 0), at the trace's arrival times or in a closed
              loop of N clients, sends a little apart; keep each answer and its times
    counters  /metrics before and after: the server's own total of prompt and cached tokens
    predict   replay the model, built with the engine's settings, over the run as it
              happened (engine_times): when the engine started and released each request,
              and the tokens it generated (a later turn that repeats an answer hits it)
    compare   predicted vs measured cached tokens, per request and overall

Nothing measured about the cache feeds the prediction: only the schedule and the outputs,
which a log of a real run would hold anyway. The network goes through the caller's
``httpx.AsyncClient`` and the engine adapter; :func:`predict` and :func:`compare` are pure.
Engine quirks the adapters do not cover (request fields that return generated ids,
llama.cpp's ``timings`` and slot ids) are read here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from kvroute.cache.base import CacheGeometry
from kvroute.cache.compare import CachedTokensComparison, compare_cached_tokens
from kvroute.cache.llamacpp import LlamaCppConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay import ReplayOutcome, replay
from kvroute.cache.timing import ArrivalSource, Schedule, TimingOptions
from kvroute.cache.vllm import VllmConfig
from kvroute.engines.base import CacheCounters, CacheResetOutcome, EngineAdapter
from kvroute.engines.http import as_mapping, request
from kvroute.errors import EngineError, InputError, UsageError
from kvroute.trace.records import ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.types import JSONValue, TokenIds

ENGINES = ("llamacpp", "vllm")
"""Engines a trace can be validated against (SGLang has no CPU build to check on)."""
MAX_PASSES = 8
COUNTER_SETTLE_S = 10.0

Clock = Callable[[], float]


class Endpoint(enum.Enum):
    """The OpenAI endpoint a request goes to."""

    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"


class RunShape(enum.Enum):
    """How requests were sent."""

    ARRIVALS = "arrivals"
    """At the trace's arrival times (relative to the first)."""
    CLOSED_LOOP = "closed_loop"
    """``concurrency`` clients, each sending its next request when the last one answered."""


class ResetOutcome(enum.Enum):
    """Whether the run started from a cold cache."""

    RESET = "reset"
    NEEDS_RESTART = "needs_restart"
    """The engine offers no reset: it may not have been cold."""
    SKIPPED = "skipped"


Post = Callable[[Endpoint, dict[str, JSONValue]], Awaitable[Mapping[str, Any]]]
"""Sends one request body and returns the decoded answer; raises ``EngineError``."""


@dataclass(frozen=True, slots=True)
class ValidateOptions:
    concurrency: int | None = None
    """Closed loop of this many clients; ``None``: the trace's arrival times, or one at a
    time when it has none."""
    default_output_tokens: int = 16
    """``max_tokens`` for requests whose output length the trace does not give."""
    reset: bool = True
    request_timeout_s: float = 300.0
    send_gap_s: float = 0.05
    """Least time between two sends: an engine's HTTP threads race, so requests sent at
    once may be queued in any order; apart, they are queued in send order (the model's)."""
    lead_s: float = 0.02
    """How long before a client reads an answer the engine released the request; above the
    spread of one step's answers, below one engine step (see :func:`engine_times`)."""

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.default_output_tokens < 1:
            raise UsageError("the default output length must be at least 1 token")


@dataclass(frozen=True, slots=True)
class EngineSetup:
    """The model's settings: what the engine reported, and what was given."""

    engine: str
    settings: EngineSettings
    capacity_tokens: int
    reported: dict[str, int]
    """Read from the engine (``block_size``, ``num_blocks``; ``num_slots``, ``slot_ctx``)."""
    given: dict[str, JSONValue]
    """The model's other settings, as the caller gave them."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One request as sent and answered; times in seconds from the first send."""

    sent_s: float
    done_s: float
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Served:
    """What the engine said about one request."""

    sent_s: float
    done_s: float
    started_s: float
    """When the engine began the request: the answer time less the engine's own processing
    time where it reports one (llama.cpp ``timings``), else the send time."""
    slot_id: int | None
    """The llama.cpp slot that ran it (``__verbose.id_slot``); orders releases, see
    :func:`engine_times`."""
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    output_token_ids: TokenIds | None
    """Generated ids when the engine returns them (llama.cpp ``return_tokens``, vLLM
    ``return_token_ids``)."""
    prompt_token_ids: TokenIds | None
    """The prompt as the engine tokenized it, when it says (vLLM)."""


@dataclass(frozen=True, slots=True)
class RequestCheck:
    index: int
    endpoint: str
    prompt_tokens: int
    """What the model saw: the engine's own tokens where it returns them, else kvroute's."""
    engine_prompt_tokens: int
    prompt_ids_match: bool | None
    """The engine's prompt ids equal kvroute's tokenization (``None``: not returned)."""
    predicted_cached_tokens: int
    measured_cached_tokens: int
    output_tokens: int
    sent_s: float
    done_s: float


@dataclass(frozen=True, slots=True)
class RunInfo:
    """Where and how the trace was served."""

    engine: str
    url: str
    model: str
    reset: ResetOutcome
    run_shape: RunShape
    concurrency: int | None


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """Predicted vs measured cached tokens for one run of a trace on one engine."""

    engine: str
    url: str
    model: str
    reset: ResetOutcome
    run_shape: RunShape
    concurrency: int | None
    setup: EngineSetup
    num_requests: int
    prompt_tokens: int
    engine_prompt_tokens: int
    num_prompt_mismatches: int
    """Requests whose prompt the engine tokenized differently (count or ids)."""
    predicted_cached_tokens: int
    measured_cached_tokens: int
    predicted_hit_ratio: float
    measured_hit_ratio: float
    """Per-response cached tokens over the engine's prompt tokens."""
    counter_prompt_tokens: int | None
    counter_cached_tokens: int | None
    counter_hit_ratio: float | None
    """The same from the /metrics counter deltas (``None``: not exported)."""
    hit_ratio_error_pp: float
    """100 × (predicted − measured) overall hit ratio; measured from the counters when
    available, else from the responses."""
    request_mae_pp: float
    """Mean over requests of |predicted − measured| cached share of the prompt, × 100."""
    comparison: CachedTokensComparison
    passes: int
    """Replays until the schedule settled (see :func:`predict`)."""
    requests: list[RequestCheck]
    notes: list[str] = field(default_factory=list)
    serve_s: float = 0.0
    elapsed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Prediction:
    outcome: ReplayOutcome
    requests: list[Request]
    """The run as it happened (token prompts, send/answer times, generated outputs, the
    engine's per-response cached tokens as ``reported_cached_tokens``), for ``simulate()``."""
    served: list[Served]
    passes: int


# -- what to send ----------------------------------------------------------------------------


def request_body(
    req: Request, *, engine: str, model: str, max_tokens: int
) -> tuple[Endpoint, dict[str, JSONValue]]:
    """The endpoint and body for ``req``: greedy, ``max_tokens`` long, with the fields that
    make ``engine`` cache the prompt and return the generated ids. Raises ``InputError``
    for a hash-only prompt, which no engine can be sent."""
    p = req.prompt
    body: dict[str, JSONValue] = {"model": model, "max_tokens": max_tokens, "temperature": 0.0}
    if isinstance(p, ChatPrompt):
        endpoint = Endpoint.CHAT
        body["messages"] = p.messages
        if p.tools:
            body["tools"] = p.tools
    elif isinstance(p, TextPrompt):
        endpoint = Endpoint.COMPLETIONS
        body["prompt"] = p.text
    elif isinstance(p, TokenPrompt):
        endpoint = Endpoint.COMPLETIONS
        body["prompt"] = p.token_ids.tolist()
    else:
        raise InputError(
            "a hash-only prompt cannot be sent to an engine",
            line=req.source_line,
            hint="validate with a trace that has the prompts (chat, text or token ids)",
        )
    if engine == "llamacpp":
        # verbose + return_tokens put the generated ids in __verbose.tokens.
        body.update({"cache_prompt": True, "return_tokens": True, "verbose": True})
    elif engine == "vllm":
        body["return_token_ids"] = True
    return endpoint, body


def _ids(value: Any) -> TokenIds | None:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        return None
    return np.asarray(value, dtype=np.uint32)


def read_answer(adapter: EngineAdapter, answer: Answer) -> Served:
    """The cache reading, output and tokenized prompt of one answer. Raises ``EngineError``
    when the answer carries no cache reading (the engine lacks the flag that adds it)."""
    body = answer.body
    usage = adapter.response_cache_usage(body)
    if usage is None:
        raise EngineError(
            f"{adapter.base_url} answered without cached-token counts",
            hint="vLLM needs --enable-prompt-tokens-details",
        )
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    verbose = body.get("__verbose")
    out_ids = _ids(choice.get("token_ids")) if isinstance(choice, Mapping) else None
    if out_ids is None and isinstance(verbose, Mapping):
        out_ids = _ids(verbose.get("tokens"))
    prompt_ids = _ids(body.get("prompt_token_ids"))
    if prompt_ids is None and isinstance(choice, Mapping):
        prompt_ids = _ids(choice.get("prompt_token_ids"))
    raw_usage = body.get("usage")
    completion = raw_usage.get("completion_tokens") if isinstance(raw_usage, Mapping) else None
    n_out = (
        len(out_ids) if out_ids is not None else completion if isinstance(completion, int) else 0
    )
    timings = body.get("timings")
    busy_ms = 0.0
    if isinstance(timings, Mapping):
        busy_ms = sum(float(timings.get(k) or 0.0) for k in ("prompt_ms", "predicted_ms"))
    slot = verbose.get("id_slot") if isinstance(verbose, Mapping) else None
    return Served(
        sent_s=answer.sent_s,
        done_s=answer.done_s,
        started_s=max(answer.sent_s, answer.done_s - busy_ms / 1000.0)
        if busy_ms
        else answer.sent_s,
        slot_id=slot if isinstance(slot, int) else None,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        output_tokens=n_out,
        output_token_ids=out_ids,
        prompt_token_ids=prompt_ids,
    )


# -- the run ---------------------------------------------------------------------------------


def http_post(client: httpx.AsyncClient, base_url: str, *, timeout_s: float) -> Post:
    """A :data:`Post` that sends to ``base_url`` through ``client``."""
    root = base_url.rstrip("/")

    async def post(endpoint: Endpoint, body: dict[str, JSONValue]) -> Mapping[str, Any]:
        url = f"{root}{endpoint.value}"
        response = await request(client, "POST", url, json_body=body, timeout_s=timeout_s)
        try:
            decoded = response.json()
        except ValueError:
            raise EngineError(f"POST {url} did not answer JSON: {response.text[:200]!r}") from None
        return as_mapping(decoded, url)

    return post


async def serve(
    work: Sequence[tuple[Endpoint, dict[str, JSONValue]]],
    post: Post,
    *,
    arrivals_s: Sequence[float] | None,
    concurrency: int,
    send_gap_s: float = 0.0,
    clock: Clock = time.monotonic,
) -> list[Answer]:
    """Send every request: at ``arrivals_s`` (seconds from the start) when given, else in a
    closed loop of ``concurrency`` clients taking requests in order; any two sends at least
    ``send_gap_s`` apart, in that order. The first failure cancels the rest and is raised."""
    answers: list[Answer | None] = [None] * len(work)
    t0 = clock()
    gate = asyncio.Lock()  # FIFO: sends leave in the order they were due
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

    async def at(i: int, when_s: float) -> None:
        delay = when_s - (clock() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        await send(i)

    queue = iter(range(len(work)))

    async def client() -> None:
        for i in queue:  # shared: each client takes the next request in trace order
            await send(i)

    async with asyncio.TaskGroup() as group:
        if arrivals_s is not None:
            for i, when in enumerate(arrivals_s):
                group.create_task(at(i, when))
        else:
            for _ in range(concurrency):
                group.create_task(client())
    return [a for a in answers if a is not None]


async def read_setup(adapter: EngineAdapter, given: EngineSettings) -> EngineSetup:
    """The model settings for the engine behind ``adapter``: its reported KV geometry
    over the ``given`` settings. Raises ``EngineError`` when the engine reports none."""
    cap = await adapter.kv_capacity()
    if cap is None:
        raise EngineError(f"{adapter.base_url} does not report its KV cache size")
    engine = adapter.engine
    if engine == "vllm":
        vllm = dataclasses.replace(given.vllm, block_size_tokens=cap.block_size_tokens)
        return EngineSetup(
            engine,
            dataclasses.replace(given, vllm=vllm),
            cap.total_tokens,
            {"block_size": cap.block_size_tokens, "num_blocks": cap.num_blocks},
            {"max_num_seqs": vllm.max_num_seqs},
        )
    if engine == "llamacpp":
        if cap.num_slots is None or cap.slot_len_tokens is None:
            raise EngineError(f"{adapter.base_url} does not report its slots")
        llama = dataclasses.replace(given.llamacpp, num_slots=cap.num_slots)
        # A unified buffer gives every slot the whole pool, so /props's per-slot n_ctx is it.
        pool = cap.slot_len_tokens if llama.kv_unified else cap.num_slots * cap.slot_len_tokens
        settings = {f.name: getattr(llama, f.name) for f in dataclasses.fields(llama)}
        del settings["num_slots"]
        return EngineSetup(
            engine,
            dataclasses.replace(given, llamacpp=llama),
            pool,
            {"num_slots": cap.num_slots, "slot_ctx": cap.slot_len_tokens},
            settings,
        )
    raise UsageError(f"cannot validate against {engine}", hint=f"one of {', '.join(ENGINES)}")


async def _counters(adapter: EngineAdapter) -> CacheCounters | None:
    try:
        return await adapter.cache_counters()
    except EngineError:
        return None


async def _counter_delta(
    adapter: EngineAdapter, before: CacheCounters, expected_prompt_tokens: int, clock: Clock
) -> CacheCounters | None:
    """Counters since ``before``, re-read until they account for every prompt token:
    vLLM's API server updates them from engine-core stats a moment after answering."""
    start = clock()
    while True:
        after = await _counters(adapter)
        if after is None:
            return None
        delta = after.since(before)
        settled = delta.prompt_tokens is None or delta.prompt_tokens >= expected_prompt_tokens
        if settled or clock() - start > COUNTER_SETTLE_S:
            return delta
        await asyncio.sleep(0.2)


async def validate(
    requests: Sequence[Request],
    prompt_ids: Sequence[TokenIds],
    adapter: EngineAdapter,
    post: Post,
    given: EngineSettings,
    *,
    options: ValidateOptions | None = None,
    clock: Clock = time.monotonic,
) -> tuple[ValidationResult, Prediction]:
    """Serve ``requests`` (as read: chat, text or token prompts) on the engine behind
    ``adapter`` and compare the model's prediction with what the engine measured.

    ``prompt_ids[i]`` is request ``i`` tokenized as the model should see it. Mutates the
    engine's cache (reset first, unless disabled). Raises ``EngineError`` when the engine
    cannot be read or a request fails, ``InputError`` for hash-only prompts.
    """
    started = clock()
    opts = options or ValidateOptions()
    if len(requests) != len(prompt_ids):
        raise ValueError("one tokenized prompt per request")
    if not requests:
        raise InputError("the trace has no requests")
    notes: list[str] = []
    health = await adapter.health()
    if not health.is_ready:
        raise EngineError(
            f"{adapter.engine} at {adapter.base_url} is not ready ({health.state.value}: "
            f"{health.detail})",
            hint="start it with `kvroute engines up`, or check the URL",
        )
    setup = await read_setup(adapter, given)
    models = await adapter.models()
    if not models:
        raise EngineError(f"{adapter.base_url} serves no model")
    outputs = [r.output_len or opts.default_output_tokens for r in requests]
    work = [
        request_body(r, engine=adapter.engine, model=models[0], max_tokens=max(n, 1))
        for r, n in zip(requests, outputs, strict=True)
    ]
    reset = ResetOutcome.SKIPPED
    if opts.reset:
        if adapter.engine == "llamacpp":
            await _order_slots(post, models[0], setup.reported["num_slots"])
        outcome = await adapter.reset_cache()
        reset = ResetOutcome.RESET
        if outcome is CacheResetOutcome.NEEDS_RESTART:
            reset = ResetOutcome.NEEDS_RESTART
            notes.append(
                "the engine offers no cache reset: the run may not have started cold "
                "(restart it before validating)"
            )
    else:
        notes.append("the cache was not reset: the run may not have started cold")
    arrivals = _arrivals(requests) if opts.concurrency is None else None
    shape = RunShape.ARRIVALS if arrivals is not None else RunShape.CLOSED_LOOP
    concurrency = None if arrivals is not None else (opts.concurrency or 1)
    before = await _counters(adapter)
    t_serve = clock()
    answers = await serve(
        work,
        post,
        arrivals_s=arrivals,
        concurrency=concurrency or 1,
        send_gap_s=opts.send_gap_s,
        clock=clock,
    )
    serve_s = clock() - t_serve
    served = [read_answer(adapter, a) for a in answers]
    delta = None
    if before is not None:
        expected = sum(s.prompt_tokens for s in served)
        delta = await _counter_delta(adapter, before, expected, clock)
    prediction = predict(prompt_ids, served, setup, lead_s=opts.lead_s)
    result = compare(
        prompt_ids,
        served,
        prediction,
        setup=setup,
        counters=delta,
        endpoints=[e.name.lower() for e, _ in work],
        run=RunInfo(adapter.engine, adapter.base_url, models[0], reset, shape, concurrency),
        notes=notes,
    )
    return dataclasses.replace(result, serve_s=serve_s, elapsed_s=clock() - started), prediction


async def _order_slots(post: Post, model: str, num_slots: int) -> None:
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
        await post(Endpoint.COMPLETIONS, body)


def _arrivals(requests: Sequence[Request]) -> list[float] | None:
    times = [r.arrival_s for r in requests]
    if not all(t is not None and math.isfinite(t) for t in times):
        return None
    first = min(t for t in times if t is not None)
    return [t - first for t in times if t is not None]


# -- prediction and comparison (pure) --------------------------------------------------------


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
) -> Prediction:
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
    return Prediction(outcome, timed, list(served), passes)


def compare(
    prompt_ids: Sequence[TokenIds],
    served: Sequence[Served],
    prediction: Prediction,
    *,
    setup: EngineSetup,
    counters: CacheCounters | None,
    endpoints: Sequence[str],
    run: RunInfo,
    notes: Sequence[str] = (),
) -> ValidationResult:
    """Per-request and overall comparison of ``prediction`` with what was ``served``.
    ``prompt_ids`` are kvroute's tokenization, checked against the engine's."""
    notes = list(notes)
    predicted = prediction.outcome.cached_tokens.tolist()
    measured = [s.cached_tokens for s in served]
    lengths = prediction.outcome.prompt_tokens.tolist()
    comparison = compare_cached_tokens(predicted, measured, lengths, tolerance_tokens=0)
    assert comparison is not None  # every request has a measurement
    checks = []
    mismatches = 0
    for i, (ids, s) in enumerate(zip(prompt_ids, served, strict=True)):
        same_ids = (
            None if s.prompt_token_ids is None else bool(np.array_equal(ids, s.prompt_token_ids))
        )
        if s.prompt_tokens != ids.shape[0] or same_ids is False:
            mismatches += 1
        checks.append(
            RequestCheck(
                index=i,
                endpoint=endpoints[i],
                prompt_tokens=int(lengths[i]),
                engine_prompt_tokens=s.prompt_tokens,
                prompt_ids_match=same_ids,
                predicted_cached_tokens=int(predicted[i]),
                measured_cached_tokens=s.cached_tokens,
                output_tokens=s.output_tokens,
                sent_s=s.sent_s,
                done_s=s.done_s,
            )
        )
    if mismatches:
        given = any(s.prompt_token_ids is not None for s in served)
        notes.append(
            f"the engine tokenized {mismatches} prompts differently from kvroute's tokenizer "
            + (
                "(the model was given the engine's own tokens): "
                if given
                else "(their predictions rest on other tokens than the engine cached): "
            )
            + "give the engine's tokenizer with --tokenizer (vLLM: its model directory)"
        )
    engine_prompt = sum(s.prompt_tokens for s in served)
    measured_ratio = sum(measured) / engine_prompt if engine_prompt else 0.0
    counter_ratio = None if counters is None else counters.hit_rate
    if counters is not None and counters.cached_tokens is not None:
        if counters.cached_tokens != sum(measured) or counters.prompt_tokens != engine_prompt:
            notes.append(
                f"the /metrics deltas ({counters.cached_tokens} cached of "
                f"{counters.prompt_tokens}) differ from the responses ({sum(measured)} of "
                f"{engine_prompt}): other traffic, or counters that lag"
            )
    elif counters is None:
        notes.append("the engine's /metrics counters could not be read: overall from responses")
    overall = counter_ratio if counter_ratio is not None else measured_ratio
    share_err = [
        abs(p - m) / n for p, m, n in zip(predicted, measured, lengths, strict=True) if n > 0
    ]
    return ValidationResult(
        engine=run.engine,
        url=run.url,
        model=run.model,
        reset=run.reset,
        run_shape=run.run_shape,
        concurrency=run.concurrency,
        setup=setup,
        num_requests=len(served),
        prompt_tokens=sum(lengths),
        engine_prompt_tokens=engine_prompt,
        num_prompt_mismatches=mismatches,
        predicted_cached_tokens=int(sum(predicted)),
        measured_cached_tokens=sum(measured),
        predicted_hit_ratio=comparison.predicted_hit_ratio,
        measured_hit_ratio=measured_ratio,
        counter_prompt_tokens=None if counters is None else counters.prompt_tokens,
        counter_cached_tokens=None if counters is None else counters.cached_tokens,
        counter_hit_ratio=counter_ratio,
        hit_ratio_error_pp=100.0 * (comparison.predicted_hit_ratio - overall),
        request_mae_pp=100.0 * float(np.mean(share_err)) if share_err else 0.0,
        comparison=comparison,
        passes=prediction.passes,
        requests=checks,
        notes=notes,
    )


# -- settings from a kvroute engine record ---------------------------------------------------


def given_from_argv(engine: str, argv: Sequence[str]) -> dict[str, JSONValue]:
    """Model settings an engine's command line fixes that the engine does not report
    (``kvroute engines up`` records it), as config field names and values.

    llama.cpp: ``--parallel`` turns the unified KV buffer off unless ``--kv-unified``;
    ``--cache-ram``, ``--slot-prompt-similarity``, ``--cache-reuse``,
    ``--[no-]cache-idle-slots``, ``--no-cache-prompt``. vLLM: ``--max-num-seqs``.
    """
    args = _split_equals(argv)
    found: dict[str, JSONValue] = {}
    if engine == "llamacpp":
        if _has(args, "-np", "--parallel"):
            found["kv_unified"] = False
        if _has(args, "-kvu", "--kv-unified"):
            found["kv_unified"] = True
        if _has(args, "-no-kvu", "--no-kv-unified"):
            found["kv_unified"] = False
        for names, key, kind in (
            (("-cram", "--cache-ram"), "cache_ram_mib", int),
            (("-sps", "--slot-prompt-similarity"), "slot_prompt_similarity", float),
            (("--cache-reuse",), "cache_reuse", int),
        ):
            value = _value(args, *names)
            if value is not None:
                found[key] = kind(value)
        if _has(args, "--cache-idle-slots"):
            found["cache_idle_slots"] = True
        if _has(args, "--no-cache-idle-slots"):
            found["cache_idle_slots"] = False
        if _has(args, "--no-cache-prompt"):
            found["cache_prompt"] = False
    elif engine == "vllm":
        value = _value(args, "--max-num-seqs")
        if value is not None:
            found["max_num_seqs"] = int(value)
    return found


def with_given(
    settings: EngineSettings, engine: str, values: Mapping[str, JSONValue]
) -> EngineSettings:
    """``settings`` with ``engine``'s config fields replaced by ``values``."""
    if engine == "llamacpp":
        llama: LlamaCppConfig = dataclasses.replace(settings.llamacpp, **values)
        return dataclasses.replace(settings, llamacpp=llama)
    if engine == "vllm":
        vllm: VllmConfig = dataclasses.replace(settings.vllm, **values)
        return dataclasses.replace(settings, vllm=vllm)
    return settings


def _split_equals(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        if arg.startswith("-") and "=" in arg:
            out.extend(arg.split("=", 1))
        else:
            out.append(arg)
    return out


def _has(args: Sequence[str], *names: str) -> bool:
    return any(a in names for a in args)


def _value(args: Sequence[str], *names: str) -> str | None:
    value = None
    for i, a in enumerate(args[:-1]):
        if a in names:
            value = args[i + 1]  # the last occurrence wins, as in argument parsers
    return value
