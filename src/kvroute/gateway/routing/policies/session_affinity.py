"""Session affinity: consistent hashing with bounded load (Mirrokni et al., 2018).

A session's requests go to the same backend, so its growing prefix stays in one
engine's cache; adding or removing a backend moves only the sessions it owned. No
backend takes more than ``load_factor`` times the mean load: when the session's
home backend is over that bound, the next one clockwise on the ring takes it.

Ring: ``virtual_nodes × weight`` points per backend, placed by a stable 64-bit hash
(BLAKE2b) of ``name#i``, so every gateway replica builds the same ring. Requests
without a session key fall back to least outstanding.

The ring depends only on the backend names and weights; it is built once per set
and kept in the policy object (a memo of a pure function, not shared state).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, by_load


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Ring:
    points: tuple[int, ...]
    owners: tuple[str, ...]

    @staticmethod
    def build(members: Sequence[tuple[str, float]], virtual_nodes: int) -> Ring:
        placed = sorted(
            (stable_hash(f"{name}#{i}"), name)
            for name, weight in members
            for i in range(max(1, round(virtual_nodes * weight)))
        )
        return Ring(tuple(p for p, _ in placed), tuple(n for _, n in placed))

    def walk(self, key: str) -> list[str]:
        """Distinct owners clockwise from ``key``'s point: the affinity order."""
        start = bisect.bisect(self.points, stable_hash(key))
        seen: dict[str, None] = {}
        n = len(self.points)
        for i in range(n):
            seen.setdefault(self.owners[(start + i) % n], None)
        return list(seen)


@dataclass(slots=True)
class SessionAffinity:
    load_factor: float = 1.25
    virtual_nodes: int = 64
    _rings: dict[tuple[tuple[str, float], ...], Ring] = field(default_factory=dict)

    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        n = len(backends)
        if pick.session_key is None:
            start = pick.sequence % n
            return by_load(backends, [(start + i) % n for i in range(n)])
        members = tuple(sorted((b.name, b.weight) for b in backends))
        ring = self._rings.get(members)
        if ring is None:
            if len(self._rings) > 64:  # pools change rarely; keep the memo small anyway
                self._rings.clear()
            ring = self._rings[members] = Ring.build(members, self.virtual_nodes)
        index = {b.name: i for i, b in enumerate(backends)}
        walk = [index[name] for name in ring.walk(pick.session_key)]
        # Bounded load: capacity per unit of weight, counting this request.
        total = sum(b.num_outstanding for b in backends) + 1
        total_weight = sum(b.weight for b in backends)
        within = [
            i
            for i in walk
            if backends[i].num_outstanding + 1
            <= math.ceil(self.load_factor * total * backends[i].weight / total_weight)
        ]
        return within + [i for i in walk if i not in within]


def session_affinity(options: Mapping[str, object]) -> SessionAffinity:
    allowed = {"load_factor", "virtual_nodes"}
    unknown = set(options) - allowed
    if unknown:
        raise ValueError(
            f"unknown session_affinity option(s) {', '.join(sorted(unknown))} "
            f"(valid: {', '.join(sorted(allowed))})"
        )
    load_factor = options.get("load_factor", 1.25)
    if isinstance(load_factor, bool) or not isinstance(load_factor, int | float) or load_factor < 1:
        raise ValueError("session_affinity load_factor must be a number >= 1")
    vnodes = options.get("virtual_nodes", 64)
    if isinstance(vnodes, bool) or not isinstance(vnodes, int) or not 1 <= vnodes <= 4096:
        raise ValueError("session_affinity virtual_nodes must be an integer in 1..4096")
    return SessionAffinity(load_factor=float(load_factor), virtual_nodes=vnodes)
