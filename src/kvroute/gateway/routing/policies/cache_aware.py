"""Cache-aware: the backend where the request costs least, by its cache view.

Expected cost of sending a request to backend *b*, in prefill-token equivalents::

    cost(b) = prompt_tokens - hit(b)                          the prefill it would do
            + tokens_per_outstanding * outstanding(b)          the work queued there
            + displaced_weight * displaced(b) * live(b)        the cache it destroys
            + queue_tokens  if outstanding(b) >= slots(b)      the wait for a free slot

- ``hit(b)``: the prompt tokens its cache view predicts cached (``predicted_hit_tokens``;
  below ``min_hit_tokens`` it counts as 0: a chat template's first tokens are noise);
- ``displaced(b)``: the cached tokens of earlier requests this one would overwrite. On a
  llama.cpp replica a request takes one slot and overwrites what the slot held beyond
  the prefix it reuses; when that is another live session's history, that session
  pays its whole prompt again on its next turn, on whichever replica it lands.
  ``live(b) = 0.5 ** (idle(b) / displaced_half_life)``, with ``idle(b)`` the requests
  routed since that slot was last used: a slot untouched for long most likely held a
  finished session, so a new session goes where it overwrites the least that is
  still wanted (an empty slot, then the one idle longest);
- ``slots(b)``: llama.cpp's ``--parallel``; a request beyond it waits in the engine for
  a whole earlier request to end, so a backend with a free slot wins unless the hit
  elsewhere saves more than ``queue_tokens``.

Then one guard: no backend takes more than ``load_factor`` times the mean load
(counting this request, per unit of weight): an over-bound backend goes to the end
of the order, however cheap, so one hot prefix cannot pile everything on one engine.
Ties keep the least loaded first (rotating between equal loads).

The hits, displacements and slots come in the snapshots; the policy stays pure.
Without a prompt length (the route could not tokenize) it is least outstanding.
vLLM and SGLang views report no displacement and no slots: for them the cost is the
first two terms.

Parameters (route ``policy_options``), defaults from ``bench/route_replay.py``
(``bench/gateway_cache_routing.py``'s schedules, 12 seeds, 4 llama.cpp replicas x 2
slots; see bench/RESULTS.md):

- ``min_hit_tokens`` (64): below it a predicted hit counts as none;
- ``load_factor`` (1.5): the hotspot bound, on requests in flight;
- ``tokens_per_outstanding`` (128): what one request in flight costs a newcomer, in
  prompt tokens (128 beat 0 and 256 by 1-4 pp of hit on all three schedules);
- ``displaced_weight`` (1.0): how much of the displaced tokens a newcomer pays (0
  turns the term off; 2 and 3 cost hit: requests then queue to spare slots);
- ``displaced_half_life`` (8.0, requests): how fast an idle slot stops counting as
  live; about the number of sessions a slot's owner competes with for turns;
- ``queue_tokens`` (512): the price of waiting for a slot, in prompt tokens.

Not modelled: the answer's own tokens. The view stores generated tokens as
placeholders that never match (it does not see the answer's token ids), so a
follow-up that re-sends the answer is predicted to hit only up to the answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput, by_load


@dataclass(frozen=True, slots=True)
class CacheAware:
    min_hit_tokens: int = 64
    load_factor: float = 1.5
    tokens_per_outstanding: int = 128
    displaced_weight: float = 1.0
    displaced_half_life: float = 8.0
    queue_tokens: int = 512

    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        n = len(backends)
        start = pick.sequence % n  # ties between equal loads rotate
        by_least_load = by_load(backends, [*range(start, n), *range(start)])
        prompt_tokens = pick.prompt_tokens
        if prompt_tokens <= 0:
            return by_least_load
        total = 1
        total_weight = 0.0
        for b in backends:
            total += b.num_outstanding
            total_weight += b.weight
        bound = self.load_factor * total
        within: list[int] = []
        over: list[int] = []
        for i in by_least_load:
            b = backends[i]
            fits = b.num_outstanding + 1 <= math.ceil(bound * b.weight / total_weight)
            (within if fits else over).append(i)
        if len(within) > 1:
            costs = [self.cost(b, prompt_tokens) for b in backends]
            within.sort(key=costs.__getitem__)
        within += over
        return within

    def cost(self, backend: BackendSnapshot, prompt_tokens: int) -> float:
        """The request's expected cost on ``backend``, in prompt-token equivalents."""
        hit = backend.predicted_hit_tokens
        uncached = prompt_tokens - (hit if hit >= self.min_hit_tokens else 0)
        outstanding = backend.num_outstanding
        cost = uncached + self.tokens_per_outstanding * outstanding / backend.weight
        displaced = backend.displaced_tokens
        if displaced:  # (terms that are zero are skipped: the sum is the same)
            live = math.pow(0.5, backend.displaced_idle_requests / self.displaced_half_life)
            cost += self.displaced_weight * displaced * live
        slots = backend.num_slots
        if slots is not None and outstanding >= slots:
            cost += self.queue_tokens
        return cost


def cache_aware(options: Mapping[str, object]) -> CacheAware:
    defaults = CacheAware()
    allowed = {f.name for f in fields(CacheAware)}
    unknown = set(options) - allowed
    if unknown:
        raise ValueError(
            f"unknown cache_aware option(s) {', '.join(sorted(unknown))} "
            f"(valid: {', '.join(sorted(allowed))})"
        )

    def integer(name: str, low: int) -> int:
        value = options.get(name, getattr(defaults, name))
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"cache_aware {name} must be an integer >= {low}")
        return value

    def number(name: str, low: float, *, inclusive: bool = True) -> float:
        value = options.get(name, getattr(defaults, name))
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value < low
            or (value == low and not inclusive)
        ):
            bound = ">=" if inclusive else ">"
            raise ValueError(f"cache_aware {name} must be a number {bound} {low:g}")
        return float(value)

    return CacheAware(
        min_hit_tokens=integer("min_hit_tokens", 1),
        load_factor=number("load_factor", 1),
        tokens_per_outstanding=integer("tokens_per_outstanding", 0),
        displaced_weight=number("displaced_weight", 0),
        displaced_half_life=number("displaced_half_life", 0, inclusive=False),
        queue_tokens=integer("queue_tokens", 0),
    )
