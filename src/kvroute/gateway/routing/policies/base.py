"""What a routing policy sees, and the one interface every policy has.

A policy orders the available backends of a pool, most preferred first; the proxy
sends to the first and fails over down the list. Policies are pure: they get plain
snapshots, never a web request, and everything that varies is passed in (the
``rng`` for randomness, ``sequence`` for turn-taking). The same input gives the same
order, so tests need no fakes::

    order = policy.order(snapshots, PickInput(sequence=7, rng=random.Random(0)))
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from kvroute.gateway.types import WorkloadClass


class BackendSnapshot(NamedTuple):
    """One backend as a policy sees it, at one moment. (A named tuple: a cache_aware
    route builds one per backend per request, and a frozen dataclass costs several
    times more to build.)"""

    name: str
    weight: float
    num_outstanding: int
    """Requests the gateway has sent it that have not finished (streams included)."""
    predicted_hit_tokens: int = 0
    """Prompt tokens its cache view predicts it would serve from cache (cache_aware)."""
    displaced_tokens: int = 0
    """Cached tokens of earlier requests this one would overwrite there (cache_aware;
    llama.cpp: the idle slot it would take, beyond the prefix it reuses)."""
    displaced_idle_requests: int = 0
    """Requests routed since those displaced tokens were last used."""
    num_slots: int | None = None
    """Requests it runs at once before the next one waits (llama.cpp slots); None: unknown."""


class PickInput(NamedTuple):
    """What a policy may use besides the snapshots (a named tuple, as BackendSnapshot).

    ``sequence`` counts the route's requests (round robin takes turns with it);
    ``session_key`` is the request's session (header or ``user``), None without one.
    """

    rng: random.Random
    sequence: int = 0
    session_key: str | None = None
    workload: WorkloadClass | None = None
    prompt_tokens: int = 0
    """The prompt's length in tokens when the route tokenizes (cache_aware), else 0."""


class Policy(Protocol):
    """Orders candidates: a permutation of ``range(len(backends))``, best first.

    ``backends`` is never empty. Must not mutate anything but ``pick.rng``.
    """

    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]: ...


class PolicyFactory(Protocol):
    """Builds a policy from a route's ``policy_options`` (raises ``ValueError`` with a
    readable message for a bad option)."""

    def __call__(self, options: Mapping[str, object]) -> Policy: ...


def no_options(name: str, options: Mapping[str, object]) -> None:
    """For policies that take none: any option given is an error."""
    if options:
        raise ValueError(f"policy '{name}' takes no options (got {', '.join(sorted(options))})")


def by_load(backends: Sequence[BackendSnapshot], indexes: Sequence[int]) -> list[int]:
    """``indexes`` sorted by outstanding requests per unit of weight (stable)."""
    loads = [b.num_outstanding / b.weight for b in backends]
    return sorted(indexes, key=loads.__getitem__)
