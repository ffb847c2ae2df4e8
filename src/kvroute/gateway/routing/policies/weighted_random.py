"""Weighted random: pick in proportion to ``weight``; the failover order is a weighted
sample without replacement (Efraimidis–Spirakis keys ``u ** (1 / w)``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, no_options


@dataclass(frozen=True, slots=True)
class WeightedRandom:
    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        keys = [pick.rng.random() ** (1.0 / b.weight) for b in backends]
        return sorted(range(len(backends)), key=lambda i: -keys[i])


def weighted_random(options: Mapping[str, object]) -> WeightedRandom:
    no_options("weighted_random", options)
    return WeightedRandom()
