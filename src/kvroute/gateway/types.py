"""The gateway's small shared vocabulary: workload classes and what the layers learn
about a request (HTTP requests and responses are :mod:`kvroute.http.messages`').

Every middleware has the same shape: a class built with the next handler (``app``)
and its own settings, that is itself a :data:`GatewayHandler`::

    class SomeMiddleware:
        def __init__(self, app: GatewayHandler, ...) -> None: ...
        async def __call__(self, request: GatewayRequest) -> Response: ...
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from kvroute.http.messages import Handler, HttpRequest
from kvroute.types import TokenIds


class WorkloadClass(enum.Enum):
    """What kind of work a request is (see classify.py); a metrics label and route key."""

    STRUCTURED = "structured"
    AGENT = "agent"
    TOOLS = "tools"
    LONG_PREFIX = "long_prefix"
    CHAT = "chat"
    COMPLETION = "completion"


@dataclass(slots=True)
class RequestContext:
    """What the layers learn about one request as it passes; read by the access log
    and metrics at its end. Mutable by design: one per request, never shared."""

    key_name: str = ""
    model: str = ""
    workload: WorkloadClass | None = None
    workload_reason: str = ""
    route_detail: str = ""
    """Why the backend was chosen, when the policy can say (cache_aware's predicted hits)."""
    route: str = ""
    pool: str = ""
    policy: str = ""
    backend: str = ""
    attempts: int = 0
    stream: bool = False
    error_kind: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_token_ids: tuple[str, TokenIds] | None = None
    """(tokenizer name, the prompt's ids) when the route tokenized it (cache_aware):
    capture reuses them instead of tokenizing again."""


GatewayRequest: TypeAlias = HttpRequest[RequestContext]
"""An HTTP request as the gateway's layers see it: with its :class:`RequestContext`."""
GatewayHandler: TypeAlias = Handler[RequestContext]
