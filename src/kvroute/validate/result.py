"""What ``kvroute simulate --validate`` works with and reports: options, the engine's
settings, one answer, one request's check and the whole run's result. Plain records."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvroute.cache.compare import CachedTokensComparison
from kvroute.cache.registry import EngineSettings
from kvroute.errors import UsageError
from kvroute.types import JSONValue, TokenIds

ENGINES = ("llamacpp", "vllm", "sglang")
"""Engines a trace can be validated against."""


class CompletionPath(enum.Enum):
    """The OpenAI completion path a validation request is posted to."""

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
    spread of one step's answers, below one engine step (see
    :func:`~kvroute.validate.predict.engine_times`)."""

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
    :func:`~kvroute.validate.predict.engine_times`."""
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
    """Replays until the schedule settled (see :func:`~kvroute.validate.predict.predict`)."""
    requests: list[RequestCheck]
    notes: list[str] = field(default_factory=list)
    serve_s: float = 0.0
    elapsed_s: float = 0.0
