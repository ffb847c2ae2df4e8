"""``explain_request`` on a constructed trace whose answers are known."""

from __future__ import annotations

import numpy as np

from kvroute.analyze.explain import EngineKept, explain_request


def _ids(*parts: range) -> np.ndarray:
    return np.concatenate([np.array(p, dtype=np.uint32) for p in parts])


SYS, Q1, A1, Q2, Q3 = (
    range(0, 40),
    range(100, 110),
    range(200, 220),
    range(300, 305),
    range(400, 408),
)


def test_follow_up_turn_reuses_its_conversation_and_the_system_prompt() -> None:
    trace = [
        _ids(SYS, Q1),  # 0: conversation a, turn 1
        _ids(SYS, Q3),  # 1: conversation b shares the system prompt
        _ids(SYS, Q1, A1, Q2),  # 2: conversation a, turn 2
    ]
    e = explain_request(
        trace,
        2,
        sessions=["a", "b", "a"],
        source_line=3,
        segments=[
            ("messages[0] (system)", 40, "sys"),
            ("messages[1] (user)", 50, None),
            ("messages[2] (assistant)", 70, None),
            ("messages[3] (user)", 75, None),
        ],
        capacity_tokens=1000,
        engines=[EngineKept("sglang", 70)],
    )
    assert (e.prompt_tokens, e.reused_tokens) == (75, 50)
    assert e.best_match == 0 and e.best_match_same_conversation and e.first_holder == 0
    seg = {s.field: s for s in e.segments}
    assert seg["messages[0] (system)"].reused_tokens == 40
    assert seg["messages[0] (system)"].source_request == 0  # first held by request 0
    assert seg["messages[1] (user)"].reused_tokens == 10
    assert seg["messages[1] (user)"].source_request == 0
    assert seg["messages[2] (assistant)"].reused_tokens == 0
    assert seg["messages[2] (assistant)"].source_request is None
    assert e.engines == [EngineKept("sglang", 70)]


def test_most_recent_best_match_and_first_holder() -> None:
    trace = [_ids(SYS), _ids(SYS, Q3), _ids(SYS, Q3), _ids(SYS, Q3, Q2)]
    e = explain_request(trace, 3, sessions=[None] * 4, segments=[("prompt", 53, None)])
    assert e.reused_tokens == 48 and e.best_match == 2 and e.first_holder == 1
    assert not e.best_match_same_conversation
    (s,) = e.segments
    assert (s.reused_tokens, s.source_request) == (48, 1)


def test_first_request_reuses_nothing() -> None:
    e = explain_request([_ids(SYS)], 0, sessions=["s"], segments=[("prompt", 40, None)])
    assert e.reused_tokens == 0 and e.best_match is None and e.first_holder is None
    assert e.segments[0].source_request is None
