"""The ``classify:`` section: the thresholds of the workload classes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClassifyOptions:
    agent_min_steps: int = 4
    long_prefix_min_chars: int = 4000
