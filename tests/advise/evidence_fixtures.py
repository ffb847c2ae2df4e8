"""Constructed evidence and inputs for the decision tests: no replay, exact numbers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvroute.advise.base import EngineFigures
from kvroute.advise.decide import ClassInput, DecisionContext
from kvroute.advise.hardware import Hardware, resolve_hardware
from kvroute.advise.options import AdviseOptions, Exposure, Ops, Team
from kvroute.advise.rules import Advisory
from kvroute.cache.capacity import resolve_model
from kvroute.trace.records import Request, TokenPrompt

PROMPT_TOKENS = 1000


def requests(n: int, *, sessions: int | None = None) -> list[Request]:
    """``n`` tokenized requests of PROMPT_TOKENS tokens, one session each unless given."""
    return [
        Request(
            prompt=TokenPrompt(np.arange(PROMPT_TOKENS, dtype=np.uint32) + i),
            session_id=None if sessions is None else f"s{i % sessions}",
            user_id=f"u{i % 3}",
        )
        for i in range(n)
    ]


Curve = Callable[[int, int], float]
"""(request index, capacity tokens) -> hit share of that request."""


@dataclass
class FakeEvidence:
    """Per engine a hit share per request, optionally depending on the pool."""

    shares: dict[str, Curve]
    calls: list[tuple[str, int | None]] = field(default_factory=list)

    @property
    def metric(self) -> str:
        return "prefill_saved"

    def figures(
        self,
        requests: Sequence[Request],
        engine: str,
        hardware: Hardware,
        *,
        capacity_tokens: int | None = None,
    ) -> EngineFigures:
        pool = hardware.pool_tokens if capacity_tokens is None else capacity_tokens
        self.calls.append((engine, capacity_tokens))
        weight = np.full(len(requests), float(PROMPT_TOKENS))
        idx = [
            int(r.prompt.token_ids[0]) if isinstance(r.prompt, TokenPrompt) else 0 for r in requests
        ]
        benefit = np.array([self.shares[engine](i, pool) * PROMPT_TOKENS for i in idx])
        return EngineFigures(engine, self.metric, benefit, weight, pool)


def flat(share: float, jitter: float = 0.0) -> Curve:
    """The same share at every pool; ``jitter`` alternates +/- per request."""
    return lambda i, _cap: share + (jitter if i % 2 else -jitter)


def hardware(gpu: str = "h100-80gb", model: str = "llama-3.1-8b") -> Hardware:
    return resolve_hardware(resolve_model(model), gpu)


def class_input(
    n: int = 400,
    *,
    name: str = "chat",
    overlap: float = 0.5,
    concurrency: float = 4.0,
    tenants: int = 1,
    share: float = 1.0,
) -> ClassInput:
    reqs = requests(n)
    return ClassInput(
        name=name,
        requests=reqs,
        share_of_requests=share,
        overlap=overlap,
        concurrency_p90=concurrency,
        num_tenants=tenants,
        isolated_overlap=None,
        clusters=list(range(n)),
    )


def context(
    evidence: FakeEvidence,
    *,
    team: int = 3,
    ops: Ops = Ops.MEDIUM,
    exposure: Exposure = Exposure.INTERNAL,
    gpu: str = "h100-80gb",
    current: dict[str, str] | None = None,
    advisories: list[Advisory] | None = None,
) -> DecisionContext:
    return DecisionContext(
        hardware=hardware(gpu),
        options=AdviseOptions(team=Team(team, ops), exposure=exposure),
        evidence=evidence,
        advisories=advisories or [],
        current=current or {},
    )
