"""The ``traffic:`` section: the live traffic window."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TrafficConfig:
    """The ``traffic:`` section."""

    window_requests: int = 1000
    """Rolling window: at most this many of the latest requests ..."""
    window_s: float = 600.0
    """... and none older than this."""
    block_size_tokens: int = 16
    """Block size of the overlap index (vLLM's)."""
    min_requests: int = 20
    """Tokenized requests in the window before the overlap is placed in a band."""
    band_hold_s: float = 60.0
    """How long the overlap must stay in a new band before it counts (and warns)."""
