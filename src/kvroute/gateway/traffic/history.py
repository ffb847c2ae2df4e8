"""The last minutes of traffic, a bucket a minute: requests, prefix overlap and each
backend's engine-reported hit, for the status page's history (the window itself only
knows "now")."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

BUCKET_S = 60.0
NUM_BUCKETS = 30
"""Kept: half an hour of minutes."""


@dataclass(slots=True)
class _BackendMinute:
    num_requests: int = 0
    prompt_tokens: int = 0
    """Engine-reported prompt tokens of the requests that reported cached tokens."""
    cached_tokens: int = 0


@dataclass(slots=True)
class _Minute:
    index: int
    """``floor(t / BUCKET_S)`` of the monotonic clock."""
    num_requests: int = 0
    num_tokens: int = 0
    """Prompt tokens of the tokenized requests."""
    matched_tokens: int = 0
    """Of those, already in the window when they arrived."""
    backends: dict[str, _BackendMinute] = field(default_factory=dict)


class TrafficHistory:
    """Per-minute totals of answered requests, the last :data:`NUM_BUCKETS` minutes.
    Fed by :class:`~kvroute.gateway.traffic.shape.TrafficShape` (``add``), read by the
    status page (``minutes``). Times are the window's monotonic seconds."""

    def __init__(self, num_buckets: int = NUM_BUCKETS, bucket_s: float = BUCKET_S) -> None:
        self.bucket_s = bucket_s
        self.num_buckets = num_buckets
        self._minutes: deque[_Minute] = deque(maxlen=num_buckets)

    def add(
        self,
        now_s: float,
        *,
        backend: str,
        num_tokens: int,
        matched_tokens: int,
        usage_prompt_tokens: int,
        reported_cached_tokens: int | None,
    ) -> None:
        """One answered request at ``now_s``; its engine hit counts only when the
        engine reported cached tokens."""
        index = int(now_s // self.bucket_s)
        if not self._minutes or self._minutes[-1].index != index:
            self._minutes.append(_Minute(index))
        minute = self._minutes[-1]
        minute.num_requests += 1
        minute.num_tokens += num_tokens
        minute.matched_tokens += matched_tokens
        b = minute.backends.setdefault(backend, _BackendMinute())
        b.num_requests += 1
        if reported_cached_tokens is not None and usage_prompt_tokens:
            b.prompt_tokens += usage_prompt_tokens
            b.cached_tokens += reported_cached_tokens

    def minutes(self, now_s: float, backend_names: list[str]) -> list[dict[str, Any]]:
        """Newest first, one entry per minute from now back to the oldest kept (idle
        minutes with zeros): ``age_min`` (0: the current minute), ``requests``,
        ``prefix_overlap`` (None: nothing tokenized), and per backend (every one in
        ``backend_names`` or seen) ``requests`` and ``hit_ratio`` (None: not reported)."""
        if not self._minutes:
            return []
        now = int(now_s // self.bucket_s)
        by_index = {m.index: m for m in self._minutes}
        names = sorted(set(backend_names).union(*(m.backends for m in self._minutes)))
        oldest = max(self._minutes[0].index, now - self.num_buckets + 1)
        out = []
        for index in range(now, oldest - 1, -1):
            m = by_index.get(index) or _Minute(index)
            out.append(
                {
                    "age_min": now - index,
                    "requests": m.num_requests,
                    "prefix_overlap": m.matched_tokens / m.num_tokens if m.num_tokens else None,
                    "backends": {name: _backend_json(m.backends.get(name)) for name in names},
                }
            )
        return out


def _backend_json(b: _BackendMinute | None) -> dict[str, Any]:
    if b is None:
        return {"requests": 0, "hit_ratio": None}
    hit = b.cached_tokens / b.prompt_tokens if b.prompt_tokens else None
    return {"requests": b.num_requests, "hit_ratio": hit}
