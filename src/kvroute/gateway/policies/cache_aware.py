"""Cache-aware: the backend where the request costs least, by its cache view.

Expected cost of sending a request to backend *b*, in prefill-token equivalents::

    cost(b) = (prompt_tokens - predicted_hit(b)) + tokens_per_outstanding * outstanding(b)

the uncached prefill it would do plus the work already queued there (each request in
flight counts as ``tokens_per_outstanding`` tokens of prefill and decode). Two guards:

- a hit below ``min_hit_tokens`` on every backend is a miss: the request goes to the
  least loaded backend, so cold traffic spreads evenly;
- no backend takes more than ``load_factor`` times the mean load (counting this
  request, per unit of weight): an over-bound backend goes to the end of the order,
  however good its hit, so one hot prefix cannot pile everything on one engine.

The predicted hits come in the snapshots (``predicted_hit_tokens``); the policy stays
pure. Without a prompt length (the route could not tokenize) it is least outstanding.

Parameters (route ``policy_options``):

- ``min_hit_tokens`` (64): below it a hit is noise (a chat template's first tokens);
- ``load_factor`` (1.5): the hotspot bound, on requests in flight;
- ``tokens_per_outstanding`` (256): what one request in flight costs a newcomer, in
  prompt tokens. On 4 llama.cpp replicas x 2 slots, 0..256 gave the same hit within
  1.5 pp (``bench/gateway_cache_routing.py``'s schedules, kvroute's slot model): a
  session either still owns a slot somewhere or nowhere, so the hit term decides.

llama.cpp backends: the view models the slot llama-server would pick (best
LCP / prompt above ``--slot-prompt-similarity``, else least recently used), so a session
whose slot another request took is predicted cold and goes to the least loaded replica
instead of staying for a hit it no longer has. What the cost does not price: the slot
this request would *take* from another session (a new session, or one sharing only a
system prompt, overwrites a live session's history), and load over time -- with one
request in flight at a time the bound never engages, so one prefix shared by all
traffic keeps every request on the replica that served it first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvroute.gateway.policies.base import BackendSnapshot, PickInput, by_load


@dataclass(frozen=True, slots=True)
class CacheAware:
    min_hit_tokens: int = 64
    load_factor: float = 1.5
    tokens_per_outstanding: int = 256

    def order(self, backends: Sequence[BackendSnapshot], pick: PickInput) -> list[int]:
        n = len(backends)
        start = pick.sequence % n  # ties between equal loads rotate
        by_least_load = by_load(backends, [(start + i) % n for i in range(n)])
        best_hit = max(b.predicted_hit_tokens for b in backends)
        if pick.prompt_tokens <= 0 or best_hit < self.min_hit_tokens:
            return by_least_load
        total = sum(b.num_outstanding for b in backends) + 1
        total_weight = sum(b.weight for b in backends)
        within = [
            i
            for i in by_least_load
            if backends[i].num_outstanding + 1
            <= math.ceil(self.load_factor * total * backends[i].weight / total_weight)
        ]
        within.sort(key=lambda i: self.cost(backends[i], pick.prompt_tokens))
        return within + [i for i in by_least_load if i not in within]

    def cost(self, backend: BackendSnapshot, prompt_tokens: int) -> float:
        uncached = prompt_tokens - backend.predicted_hit_tokens
        return uncached + self.tokens_per_outstanding * backend.num_outstanding / backend.weight


def cache_aware(options: Mapping[str, object]) -> CacheAware:
    defaults = CacheAware()
    allowed = {"min_hit_tokens", "load_factor", "tokens_per_outstanding"}
    unknown = set(options) - allowed
    if unknown:
        raise ValueError(
            f"unknown cache_aware option(s) {', '.join(sorted(unknown))} "
            f"(valid: {', '.join(sorted(allowed))})"
        )
    min_hit = options.get("min_hit_tokens", defaults.min_hit_tokens)
    if isinstance(min_hit, bool) or not isinstance(min_hit, int) or min_hit < 1:
        raise ValueError("cache_aware min_hit_tokens must be an integer >= 1")
    load_factor = options.get("load_factor", defaults.load_factor)
    if isinstance(load_factor, bool) or not isinstance(load_factor, int | float) or load_factor < 1:
        raise ValueError("cache_aware load_factor must be a number >= 1")
    per = options.get("tokens_per_outstanding", defaults.tokens_per_outstanding)
    if isinstance(per, bool) or not isinstance(per, int) or per < 0:
        raise ValueError("cache_aware tokens_per_outstanding must be an integer >= 0")
    return CacheAware(min_hit, float(load_factor), per)
