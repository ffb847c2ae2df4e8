"""``mix``: a weighted blend of other workloads, interleaved at random.

Each component is generated with its own defaults and its own RNG (derived from the
mix's), then the streams are merged in random order, each keeping its internal order
(so a session's turns stay in sequence). Session ids get the component's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from kvroute.bench.workloads.base import BenchRequest, GenContext, Workload
from kvroute.bench.workloads.params import check, param
from kvroute.errors import UsageError

DEFAULT_WEIGHTS = "qa=2,rag=3,multiturn=2,agent=2,json=1,code=1"


def parse_weights(spec: str) -> dict[str, float]:
    """``"rag=3,qa=1"`` -> ``{"rag": 3.0, "qa": 1.0}``; raises UsageError when malformed."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, value = part.partition("=")
        try:
            weight = float(value) if sep else 1.0
        except ValueError:
            raise UsageError(f"mix: weight of '{name}' is not a number: {value!r}") from None
        if weight < 0:
            raise UsageError(f"mix: weight of '{name}' is negative")
        out[name.strip()] = weight
    if not out or sum(out.values()) <= 0:
        raise UsageError(f"mix: no positive weight in {spec!r}")
    return out


@dataclass(frozen=True, slots=True)
class MixWorkload:
    weights: str = param(DEFAULT_WEIGHTS, "component=weight,... over registered workloads")
    lookup: Callable[[str], Workload] | None = field(default=None, metadata={"internal": True})
    """How a component name becomes a generator (set by the registry)."""

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(self.lookup is not None, "mix: built without a workload lookup")
        assert self.lookup is not None
        weights = parse_weights(self.weights)
        if "mix" in weights:
            raise UsageError("mix: a mix cannot contain itself")
        names = [n for n, w in weights.items() if w > 0]
        shares = np.array([weights[n] for n in names]) / sum(weights[n] for n in names)
        counts = np.floor(shares * num_requests).astype(int)
        for i in np.argsort(-(shares * num_requests - counts))[: num_requests - int(counts.sum())]:
            counts[i] += 1
        streams = [
            self.lookup(name).generate(int(c), ctx.child(i)) if c else []
            for i, (name, c) in enumerate(zip(names, counts, strict=True))
        ]
        return _merge(streams, ctx.rng)


def _merge(streams: list[list[BenchRequest]], rng: np.random.Generator) -> list[BenchRequest]:
    order = (
        np.concatenate([np.full(len(s), i) for i, s in enumerate(streams)])
        if streams
        else np.zeros(0)
    )
    rng.shuffle(order)
    pos = [0] * len(streams)
    new_index: list[dict[int, int]] = [{} for _ in streams]
    out: list[BenchRequest] = []
    for k in order.astype(int).tolist():
        req = streams[k][pos[k]]
        pos[k] += 1
        new_index[k][req.index] = len(out)
        out.append(
            replace(
                req,
                index=len(out),
                depends_on=None if req.depends_on is None else new_index[k][req.depends_on],
                session_id=None if req.session_id is None else f"{req.workload}:{req.session_id}",
            )
        )
    return out
