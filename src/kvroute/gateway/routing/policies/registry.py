"""Routing policies by name. A fresh registry per call: no module-level state.

A plugin policy registers the same way the built-ins do: ``registry.add(name, factory)``.
"""

from __future__ import annotations

from kvroute.gateway.routing.policies.base import PolicyFactory
from kvroute.gateway.routing.policies.cache_aware import cache_aware
from kvroute.gateway.routing.policies.least_outstanding import least_outstanding
from kvroute.gateway.routing.policies.power_of_two import power_of_two
from kvroute.gateway.routing.policies.round_robin import round_robin
from kvroute.gateway.routing.policies.session_affinity import session_affinity
from kvroute.gateway.routing.policies.weighted_random import weighted_random
from kvroute.registry import Registry

DEFAULT_POLICY = "least_outstanding"
CACHE_AWARE = "cache_aware"
"""The policy whose routes tokenize prompts and keep per-backend cache views."""


def policy_registry() -> Registry[PolicyFactory]:
    registry: Registry[PolicyFactory] = Registry("routing policy")
    registry.add("round_robin", round_robin)
    registry.add("weighted_random", weighted_random)
    registry.add("least_outstanding", least_outstanding)
    registry.add("power_of_two", power_of_two)
    registry.add("session_affinity", session_affinity)
    registry.add(CACHE_AWARE, cache_aware)
    return registry
