"""Round robin: take turns, starting one further along for each request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, no_options


@dataclass(frozen=True, slots=True)
class RoundRobin:
    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        n = len(backends)
        start = pick.sequence % n
        return [(start + i) % n for i in range(n)]


def round_robin(options: Mapping[str, object]) -> RoundRobin:
    no_options("round_robin", options)
    return RoundRobin()
