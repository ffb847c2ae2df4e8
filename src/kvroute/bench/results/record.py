"""What the client observed about one request: times, tokens, outcome.

Times are seconds since the run's start on the monotonic clock. ``scheduled_s`` is
the intended send time (the schedule's, or for a request that follows another, the
later of that and the other's end plus think time); latencies are measured from it,
so a client or server that falls behind is charged for it (no coordinated omission).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Outcome(enum.Enum):
    OK = "ok"
    CANCELLED = "cancelled"
    """Abandoned mid-stream on purpose (the schedule's cancel share)."""
    ERROR = "error"
    NOT_SENT = "not_sent"
    """The run's time bound came before the request's turn."""


class ErrorKind(enum.Enum):
    CONNECT = "connect"
    """No connection: refused, unreachable, DNS."""
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    HTTP_OTHER = "http_other"
    MALFORMED_HTTP = "malformed_http"
    MALFORMED_STREAM = "malformed_stream"
    """An SSE event whose data is not a JSON object, or a stream cut mid-event."""
    STREAM_ERROR = "stream_error"
    """The server reported an error inside the stream."""
    RESET = "reset"
    """The connection closed before the response ended."""
    EMPTY = "empty"
    """The response ended without a single content token."""
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"
    TIMEOUT_TOTAL = "timeout_total"
    RUN_DEADLINE = "run_deadline"
    """Still running when the run's time bound came; cut off."""
    INTERRUPTED = "interrupted"
    """Still running when the user pressed Ctrl-C; cut off (the run is marked interrupted)."""


@dataclass(slots=True)
class RequestRecord:
    """One request as sent and answered. Filled in while the response streams, then
    left unchanged."""

    index: int
    scheduled_s: float
    sent_s: float | None = None
    first_byte_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    """Arrival time of every chunk that carried content, reasoning or a tool-call delta."""
    prompt_tokens: int | None = None
    """From the response's ``usage``."""
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Engine-reported prompt tokens served from its prefix cache (via the adapter)."""
    cache_source: str | None = None
    outcome: Outcome = Outcome.OK
    error_kind: ErrorKind | None = None
    error_detail: str = ""
    http_status: int | None = None
    finish_reason: str | None = None
    text: str | None = None
    """The answer's content (kept for structured requests only)."""
    tool_arguments: str | None = None
    """The first tool call's ``function.arguments`` (structured requests only)."""
    json_parsed: bool | None = None
    schema_valid: bool | None = None
    num_retries: int = 0
    usage_body: dict[str, Any] | None = None
    """The ``usage`` and ``timings`` objects the response ended with, as received; the
    runner reads the engine's cache figures from them through its adapter."""

    def fail(self, kind: ErrorKind, detail: str, t: float | None) -> None:
        """Mark the request failed (the first failure wins)."""
        if self.outcome is Outcome.ERROR:
            return
        self.outcome = Outcome.ERROR
        self.error_kind = kind
        self.error_detail = detail[:300]
        if self.end_s is None:
            self.end_s = t
