"""Least outstanding requests: fewest in flight per unit of weight first.

Ties (an idle pool) are broken by taking turns with ``sequence``, so an idle pool is
used evenly instead of always starting with its first backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, by_load, no_options


@dataclass(frozen=True, slots=True)
class LeastOutstanding:
    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        n = len(backends)
        start = pick.sequence % n
        return by_load(backends, [(start + i) % n for i in range(n)])


def least_outstanding(options: Mapping[str, object]) -> LeastOutstanding:
    no_options("least_outstanding", options)
    return LeastOutstanding()
