"""What a workload generator makes, and the one interface every generator has.

A generator turns ``(num_requests, context)`` into :class:`BenchRequest` records: the
request body an OpenAI-compatible server receives (minus ``model``, ``stream`` and
``max_tokens``, which the runner adds), the prompt length in tokens as the target
model's tokenizer and chat template count it, and the structure a schedule must
respect (a session's next turn follows the answer to the previous one).

Generators are pure: the randomness comes in through :attr:`GenContext.rng`, so the
same seed gives the same requests, byte for byte.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kvroute.bench.workloads.params import check
from kvroute.bench.workloads.text import TextSource
from kvroute.trace.tokenizer import ChatTokenizer


class Api(enum.Enum):
    """Which OpenAI endpoint a request goes to."""

    CHAT = "chat"
    """``POST /v1/chat/completions`` with ``messages``."""
    COMPLETIONS = "completions"
    """``POST /v1/completions`` with ``prompt`` (text or token ids)."""

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self is Api.CHAT else "/v1/completions"


class StructuredKind(enum.Enum):
    """What a structured request's answer must be."""

    NONE = "none"
    JSON_SCHEMA = "json_schema"
    """``response_format: {type: json_schema}``: the message content must validate."""
    TOOL_ARGS = "tool_args"
    """A forced tool call: its ``function.arguments`` must validate."""


@dataclass(frozen=True, slots=True)
class BenchRequest:
    """One request of a workload, before scheduling.

    ``depends_on`` is the index of the request whose answer this one follows (the
    previous turn of a session, the parent step of a sub-agent); the runner sends it
    no earlier than that request's end plus ``think_s``. ``arrival_s`` is the offset
    from the first request on a replayed trace's own clock (None for generated work).
    ``schema`` is the JSON schema a structured answer must satisfy.
    """

    index: int
    workload: str
    api: Api
    body: Mapping[str, Any]
    prompt_tokens: int
    max_tokens: int
    session_id: str | None = None
    depends_on: int | None = None
    think_s: float = 0.0
    arrival_s: float | None = None
    structured: StructuredKind = StructuredKind.NONE
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Draft:
    """A request as a generator builds it; :func:`finish` measures and numbers it.

    ``depends_on`` indexes the generator's own list of drafts.
    """

    body: dict[str, Any]
    max_tokens: int
    api: Api = Api.CHAT
    session_id: str | None = None
    depends_on: int | None = None
    think_s: float = 0.0
    arrival_s: float | None = None
    structured: StructuredKind = StructuredKind.NONE
    schema: Mapping[str, Any] | None = None


@dataclass(slots=True)
class GenContext:
    """What a generator may use: the tokenizer (lengths), a seeded RNG and a text source
    drawing from that RNG. Mutable because the RNG is; one per generation."""

    tokenizer: ChatTokenizer
    rng: np.random.Generator
    text: TextSource = field(init=False)

    def __post_init__(self) -> None:
        self.text = TextSource(self.rng, tokens_per_word=TextSource.calibrate(self.tokenizer))

    @classmethod
    def seeded(cls, tokenizer: ChatTokenizer, seed: int) -> GenContext:
        return cls(tokenizer=tokenizer, rng=np.random.default_rng(seed))

    def num_tokens(self, text: str) -> int:
        """Tokens of ``text`` on its own (no template, no BOS/EOS)."""
        return int(self.tokenizer.encode_output([text])[0].shape[0])

    def sized_text(self, num_tokens: int) -> str:
        """Prose of ``num_tokens`` tokens, give or take one or two: generated, measured,
        and regenerated once at the corrected word count (for the few long segments,
        such as a shared system prompt, whose length sets a workload's overlap)."""
        text = self.text.tokens(num_tokens)
        measured = self.num_tokens(text)
        if measured and abs(measured - num_tokens) > 2:
            words = max(1, round(len(text.split()) * num_tokens / measured))
            text = self.text.words(words)
        return text

    def child(self, seed_offset: int) -> GenContext:
        """A context with its own RNG derived from this one (for mixed workloads)."""
        seed = int(self.rng.integers(0, 2**63 - 1)) + seed_offset
        return GenContext(tokenizer=self.tokenizer, rng=np.random.default_rng(seed))


class Workload(Protocol):
    """A registered generator. Its parameters are the fields of the implementing
    dataclass (see :mod:`kvroute.bench.workloads.params`)."""

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        """``num_requests`` requests (fewer only when a replayed trace ends first), in
        the order they are to be sent, numbered from 0; pure given ``ctx.rng``. Raises
        :class:`~kvroute.errors.UsageError` for bad parameters."""
        ...


def prompt_lengths(tokenizer: ChatTokenizer, drafts: Sequence[Draft]) -> list[int]:
    """Prompt tokens of each draft as the engine prefills them (chat template applied)."""
    texts: list[str] = []
    sizes: dict[int, int] = {}
    at: list[int] = []
    for i, d in enumerate(drafts):
        if d.api is Api.CHAT:
            at.append(i)
            texts.append(tokenizer.render_chat(d.body["messages"], d.body.get("tools")))
            continue
        prompt = d.body["prompt"]
        if isinstance(prompt, str):
            at.append(i)
            texts.append(prompt)
        else:
            sizes[i] = len(prompt)
    for i, ids in zip(at, tokenizer.encode_batch(texts) if texts else [], strict=True):
        sizes[i] = int(ids.shape[0])
    return [sizes[i] for i in range(len(drafts))]


PROMPT_TOKENS_TOLERANCE = 0.1
"""``prompt_tokens`` is the generated set's mean prompt within this share (tested)."""


def own_tokens(prompt_tokens: int, overlap: float, num_requests: int) -> int:
    """Tokens of each prompt outside the shared prefix, so that a set of ``num_requests``
    with an ideal overlap of ``overlap`` has a mean prompt of ``prompt_tokens``.

    The first request reuses nothing, so the shared prefix ``s`` must satisfy
    ``k s = overlap L`` with ``k = (N - 1) / N``: it is ``overlap L / k``, longer than
    ``overlap L`` for small sets, and what is left of ``L`` is the requests' own. Sizing
    the own parts as ``(1 - overlap) L`` instead lets :func:`fit_shared_system` grow the
    shared prefix past the target mean (a 391-token mean for 256 at N = 8).
    """
    k = (num_requests - 1) / max(1, num_requests)
    shared = overlap * prompt_tokens / k if k > overlap else overlap * prompt_tokens
    return max(0, round(prompt_tokens - shared))


def fit_shared_system(ctx: GenContext, drafts: Sequence[Draft], head: str, overlap: float) -> float:
    """Make every draft's system message ``head`` plus filler, sized so that the ideal
    prefix overlap of the drafts (what ``kvroute analyze`` reports) is ``overlap``.

    Drafts must be chat requests whose first message is the system message and whose
    own parts diverge right after it. With ``h`` the tokens every prompt shares with
    ``head`` alone (template headers included), ``L0`` the mean prompt with ``head``
    alone, and ``k = (N - 1) / N`` (the first request reuses nothing), the filler has
    ``s`` tokens where ``k (h + s) = overlap (L0 + s)``. Mutates the drafts' bodies.
    Targets below what the template alone shares get no filler. Returns the drafts'
    mean prompt length now (``L0 + s``, give or take the filler's token or two).
    """
    for d in drafts:
        d.body["messages"][0]["content"] = head
    lengths = prompt_lengths(ctx.tokenizer, drafts)
    probe = [
        ctx.tokenizer.encode_chat(
            [{"role": "system", "content": head}, {"role": "user", "content": c}]
        )
        for c in ("alpha", "omega")
    ]
    n = min(p.shape[0] for p in probe)
    h = int(np.argmax(probe[0][:n] != probe[1][:n]))
    k = (len(drafts) - 1) / max(1, len(drafts))
    mean0 = float(np.mean(lengths)) if lengths else 0.0
    filler = round((overlap * mean0 - k * h) / (k - overlap)) if k > overlap else 0
    if filler > 0:
        system = head + ctx.sized_text(filler)
        for d in drafts:
            d.body["messages"][0]["content"] = system
    return mean0 + max(filler, 0)


class SharedPrefixWorkload(Protocol):
    """A workload whose requests are one shared system message (``head`` plus filler)
    followed by parts of their own, sized by a mean prompt and a target overlap."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def overlap(self) -> float: ...

    def drafts(self, own_tokens: int, num_requests: int, ctx: GenContext, head: str) -> list[Draft]:
        """Requests whose own parts (after the system message ``head``) come to about
        ``own_tokens`` tokens each."""
        ...


def fit_prompt_mean(
    name: str, workload: SharedPrefixWorkload, num_requests: int, ctx: GenContext, head: str
) -> list[Draft]:
    """Drafts whose mean prompt is ``workload.prompt_tokens`` (within
    ``PROMPT_TOKENS_TOLERANCE``) and whose ideal overlap is ``workload.overlap``. They are
    built at :func:`own_tokens`'s budget, the shared prefix is fitted, and they are
    rebuilt with the budget corrected by what the templates and minimum part sizes
    added, twice at most.

    Raises :class:`UsageError` when the mean is too short for the parts every request
    has of its own at this overlap. A set too small for the overlap (``N`` requests
    share at most ``(N-1)/N``: the first reuses nothing) meets neither target.
    """
    prompt_tokens, overlap = workload.prompt_tokens, workload.overlap
    k = (num_requests - 1) / max(1, num_requests)
    if overlap > 0 and k <= overlap:
        # Too few requests to reach the overlap at all (the first reuses nothing): no
        # filler fits, so the mean cannot be steered either. A mix's smallest components
        # end up here; their share of the mix is small.
        drafts = workload.drafts(round((1 - overlap) * prompt_tokens), num_requests, ctx, head)
        fit_shared_system(ctx, drafts, head, overlap)
        return drafts
    budget = own_tokens(prompt_tokens, overlap, num_requests)
    tolerance = PROMPT_TOKENS_TOLERANCE * prompt_tokens
    shortest = float("inf")
    for _ in range(3):
        drafts = workload.drafts(budget, num_requests, ctx, head)
        mean = fit_shared_system(ctx, drafts, head, overlap)
        shortest = min(shortest, mean)
        if abs(mean - prompt_tokens) <= tolerance / 2:  # half: the rest is sampling noise
            return drafts
        # The mean moves by k / (k - overlap) per token of own part (the shared prefix
        # grows with it to keep the overlap).
        budget += round((prompt_tokens - mean) * (k - overlap) / max(k, 1e-9))
        if budget < 1:
            break
    if abs(mean - prompt_tokens) <= tolerance:
        return drafts
    check(
        mean <= prompt_tokens + tolerance,
        f"{name}: prompt_tokens={prompt_tokens} is too short for overlap {overlap} at "
        f"-n {num_requests}: the parts each request has of its own leave a mean of at "
        f"least ~{round(shortest):,} tokens (raise prompt_tokens, lower overlap, or shorten "
        f"those parts: `kvroute bench workloads {name}` lists them)",
    )
    return drafts


def finish(
    workload: str, drafts: Sequence[Draft], tokenizer: ChatTokenizer, *, first_index: int = 0
) -> list[BenchRequest]:
    """Number the drafts from ``first_index`` and measure their prompts."""
    lengths = prompt_lengths(tokenizer, drafts)
    return [
        BenchRequest(
            index=first_index + i,
            workload=workload,
            api=d.api,
            body=d.body,
            prompt_tokens=n,
            max_tokens=d.max_tokens,
            session_id=d.session_id,
            depends_on=None if d.depends_on is None else first_index + d.depends_on,
            think_s=d.think_s,
            arrival_s=d.arrival_s,
            structured=d.structured,
            schema=d.schema,
        )
        for i, (d, n) in enumerate(zip(drafts, lengths, strict=True))
    ]


def lognormal_len(rng: np.random.Generator, mean: float, sigma: float = 0.4, lo: int = 1) -> int:
    """A positive length with the given mean and log-space spread (``sigma`` 0: exact)."""
    if sigma <= 0:
        return max(lo, round(mean))
    mu = np.log(max(mean, 1.0)) - sigma**2 / 2
    return max(lo, round(float(rng.lognormal(mu, sigma))))
