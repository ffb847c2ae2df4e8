"""Power of two choices: sample two backends at random, prefer the less loaded.

Nearly as good as least-outstanding at balancing, without every gateway replica
herding onto the same idle backend. The failover order is the pair (less loaded
first), then the rest by load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, by_load, no_options


@dataclass(frozen=True, slots=True)
class PowerOfTwo:
    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        n = len(backends)
        if n == 1:
            return [0]
        pair = pick.rng.sample(range(n), 2)
        first = by_load(backends, pair)
        rest = by_load(backends, [i for i in range(n) if i not in pair])
        return first + rest


def power_of_two(options: Mapping[str, object]) -> PowerOfTwo:
    no_options("power_of_two", options)
    return PowerOfTwo()
