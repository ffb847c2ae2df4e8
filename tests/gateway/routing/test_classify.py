from __future__ import annotations

from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.routing.classify import classify
from kvroute.gateway.types import WorkloadClass

OPTS = ClassifyOptions(agent_min_steps=4, long_prefix_min_chars=100)
USER = {"role": "user", "content": "hi"}


def label(body: dict[str, object], is_chat: bool = True) -> tuple[WorkloadClass, str]:
    c = classify(body, is_chat=is_chat, options=OPTS)
    return c.workload, c.reason


def test_rules_in_order() -> None:
    assert label({"messages": [USER], "response_format": {"type": "json_object"}}) == (
        WorkloadClass.STRUCTURED,
        "structured output: json_object",
    )
    assert label({"messages": [USER], "guided_regex": "a+"})[0] is WorkloadClass.STRUCTURED
    steps = [USER, {"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * 2
    assert label({"messages": steps, "tools": [{}]}) == (
        WorkloadClass.AGENT,
        "4 assistant/tool messages in history",
    )
    assert label({"messages": [USER], "tools": [{"type": "function"}]}) == (
        WorkloadClass.TOOLS,
        "tools offered",
    )
    system = {"role": "system", "content": "s" * 150}
    assert label({"messages": [system, USER]}) == (
        WorkloadClass.LONG_PREFIX,
        "150 chars of shared prefix",
    )
    assert label({"messages": [USER]}) == (WorkloadClass.CHAT, "plain chat")
    assert label({"prompt": "x" * 500}, is_chat=False) == (
        WorkloadClass.COMPLETION,
        "plain completion",
    )


def test_content_parts_count_and_oracle_hook() -> None:
    parts = {"role": "system", "content": [{"type": "text", "text": "p" * 120}]}
    assert label({"messages": [parts, USER]})[0] is WorkloadClass.LONG_PREFIX

    class Index:
        def shared_prefix_chars(self, body: object) -> int | None:
            return 10_000

    c = classify({"prompt": "x"}, is_chat=False, options=OPTS, oracle=Index())
    assert c.workload is WorkloadClass.LONG_PREFIX
