"""Steady state: the first requests of a trace fill an empty cache, so they miss more
than the traffic does once a cache is warm. ``--warmup`` leaves them out of the headline
(they still fill the cache every later request is measured against)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvroute.errors import UsageError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Warmup:
    """A share of the requests (``share_requests``) or a time from the first arrival
    (``duration_s``); exactly one is set."""

    share_requests: float | None = None
    duration_s: float | None = None

    def __str__(self) -> str:
        if self.share_requests is not None:
            return f"first {self.share_requests * 100:g} % of requests"
        return f"first {self.duration_s:g} s of arrivals"

    def num_warmup_requests(self, arrival_s: npt.NDArray[np.float64]) -> int:
        """How many leading requests (trace order) the warm-up covers. A duration needs
        arrival times: raises ``UsageError`` when the trace has none."""
        n = arrival_s.shape[0]
        if self.share_requests is not None:
            # rounded down, as kvcache-simulator and llmtrafficlens count their warm-up
            return int(min(n, math.floor(self.share_requests * n)))
        assert self.duration_s is not None
        known = arrival_s[np.isfinite(arrival_s)]
        if known.size == 0:
            raise UsageError(
                "--warmup as a duration needs arrival times, and this trace has none",
                hint="give a share of requests instead, e.g. --warmup 20%",
            )
        end = float(known.min()) + self.duration_s
        # trace order, not arrival order: the warm-up ends at the first request after it
        after = np.flatnonzero(~(arrival_s < end))
        return int(after[0]) if after.size else n


def parse_warmup(text: str) -> Warmup:
    """``"50%"`` (a share of requests) or a duration: ``"600"``, ``"90s"``, ``"10m"``,
    ``"1h"``, ``"500ms"``. Raises ``UsageError`` naming the value otherwise."""
    value = text.strip().lower()
    if value.endswith("%"):
        try:
            share = float(value[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 <= share < 1:
            raise UsageError(f"--warmup {text!r}: a share must be at least 0 % and below 100 %")
        return Warmup(share_requests=share)
    m = _DURATION.match(value)
    if m is None:
        raise UsageError(
            f"--warmup {text!r}: expected a share of requests (20%) or a duration (600s, 10m, 1h)"
        )
    return Warmup(duration_s=float(m.group(1)) * _UNIT_S[m.group(2) or "s"])
