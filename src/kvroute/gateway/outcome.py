"""How one completion request ended: the one record the request path hands, once, to
each observer (the chosen backend's cache view, the traffic window, capture, the
rollout record).

Built when the request is over: when its answer was written to the end or abandoned
by a client that left (``ANSWERED``), when no backend answered and the gateway sent
its own error (``REFUSED``), or when the client left, or a gateway bug struck, before
any answer (``CANCELLED``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvroute.gateway.rollout.plan import ShadowPair
from kvroute.gateway.routing.plan import RoutePlan
from kvroute.gateway.types import WorkloadClass


class Ending(enum.Enum):
    ANSWERED = "answered"
    """A backend's answer went to the client (whatever its status)."""
    REFUSED = "refused"
    """No backend answered: the gateway's own error went to the client."""
    CANCELLED = "cancelled"
    """Nothing went to the client."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One completion request, over. Times are ``time.monotonic`` seconds unless
    named ``*_unix_s``; token counts are the backend's usage (None: not reported)."""

    ending: Ending
    status: int
    """The status the client got (0 when ``CANCELLED``)."""
    error_kind: str
    """The ``errors_total`` kind of a failure ("" when none)."""
    request_id: str
    received_s: float
    ended_s: float
    ended_unix_s: float
    body: Mapping[str, Any]
    """The client's request body, decoded."""
    model: str
    """The model the client asked for."""
    workload: WorkloadClass
    plan: RoutePlan
    shadow: ShadowPair | None
    """The shadow copy of this request, when one was sent."""
    pool: str
    backend: str
    """The backend that answered ("" when none did)."""
    ttft_s: float | None
    e2e_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
