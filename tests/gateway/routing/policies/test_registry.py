"""Every routing policy: an ordering of all candidates, reproducible from its inputs."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvroute.errors import UsageError
from kvroute.gateway.routing.policies.base import BackendSnapshot, PickInput
from kvroute.gateway.routing.policies.registry import policy_registry
from kvroute.gateway.routing.policies.session_affinity import SessionAffinity

snapshots = st.lists(
    st.builds(
        BackendSnapshot,
        name=st.text("abcdef", min_size=1, max_size=4),
        weight=st.floats(0.1, 10),
        num_outstanding=st.integers(0, 50),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda b: b.name,
)


@pytest.mark.parametrize("name", policy_registry().names())
@given(
    backends=snapshots,
    seed=st.integers(0, 2**32),
    sequence=st.integers(0, 10**6),
    session=st.none() | st.text(max_size=8),
)
def test_every_policy_orders_all_candidates_reproducibly(
    name: str, backends: list[BackendSnapshot], seed: int, sequence: int, session: str | None
) -> None:
    policy = policy_registry().get(name)({})

    def order() -> list[int]:
        return policy.order(backends, PickInput(random.Random(seed), sequence, session))

    first = order()
    assert sorted(first) == list(range(len(backends)))
    assert order() == first


def test_registry_error_lists_the_valid_names() -> None:
    with pytest.raises(UsageError, match="least_outstanding, power_of_two, round_robin"):
        policy_registry().get("fastest")


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="takes no options"):
        policy_registry().get("round_robin")({"x": 1})
    with pytest.raises(ValueError, match="load_factor"):
        policy_registry().get("session_affinity")({"load_factor": 0.5})


def snap(*loads: int, weights: tuple[float, ...] | None = None) -> list[BackendSnapshot]:
    weights = weights or (1.0,) * len(loads)
    return [
        BackendSnapshot(f"b{i}", w, n) for i, (n, w) in enumerate(zip(loads, weights, strict=True))
    ]


def pick(sequence: int = 0, session: str | None = None, seed: int = 0) -> PickInput:
    return PickInput(random.Random(seed), sequence, session)


def test_round_robin_takes_turns() -> None:
    rr = policy_registry().get("round_robin")({})
    assert [rr.order(snap(0, 0, 0), pick(s))[0] for s in range(6)] == [0, 1, 2, 0, 1, 2]


def test_least_outstanding_prefers_the_idle_per_weight() -> None:
    lo = policy_registry().get("least_outstanding")({})
    assert lo.order(snap(5, 1, 3), pick()) == [1, 2, 0]
    assert lo.order(snap(4, 3, weights=(4.0, 1.0)), pick())[0] == 0


def test_power_of_two_never_picks_the_busier_of_its_pair() -> None:
    p2c = policy_registry().get("power_of_two")({})
    backends = snap(9, 0, 5, 7)
    firsts = Counter(p2c.order(backends, pick(seed=s))[0] for s in range(400))
    assert 0 not in firsts  # the busiest can never win a pair
    assert firsts[1] > firsts[2] > firsts[3]


def test_weighted_random_follows_weights() -> None:
    wr = policy_registry().get("weighted_random")({})
    backends = snap(0, 0, weights=(3.0, 1.0))
    firsts = Counter(wr.order(backends, pick(seed=s))[0] for s in range(4000))
    assert 0.7 < firsts[0] / 4000 < 0.8


def test_session_affinity_is_sticky_and_moves_little() -> None:
    sa = SessionAffinity()
    backends = snap(0, 0, 0, 0)
    homes = {f"s{i}": sa.order(backends, pick(session=f"s{i}"))[0] for i in range(400)}
    assert all(
        sa.order(backends, pick(s, session=k))[0] == h for s, (k, h) in enumerate(homes.items())
    )
    assert min(Counter(homes.values()).values()) > 50  # spread over all four
    # Remove b3: only its sessions move.
    fewer = backends[:3]
    moved = sum(
        1
        for k, h in homes.items()
        if h != 3 and fewer[sa.order(fewer, pick(session=k))[0]].name != f"b{h}"
    )
    assert moved == 0


def test_session_affinity_bounds_load() -> None:
    sa = SessionAffinity(load_factor=1.25)
    home = sa.order(snap(0, 0, 0, 0), pick(session="hot"))[0]
    loads = [2, 2, 2, 2]
    loads[home] = 10  # far above 1.25 x mean
    assert sa.order(snap(*loads), pick(session="hot"))[0] != home
