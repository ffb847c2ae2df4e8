"""``agent``: a system prompt with tool schemas, then a growing history of tool calls
and tool results; some steps fork sub-agents that share the history so far.

Every step re-sends the history. The assistant's tool calls in the history are
pre-generated (``<tool_call>{...}</tool_call>`` text whose arguments satisfy the
tool's schema) and each is followed by a ``tool`` message with its result. The tool
schemas are written into the system prompt as JSON, the way text-based agents do it,
so every engine sees them whatever its chat template does with ``tools``; with
``send_tools`` they also go in the request's ``tools`` field (which vLLM accepts only
when started with ``--enable-auto-tool-choice``).

With probability ``branch_prob`` a step forks ``branch_factor`` sub-agents. Each
starts from a copy of the parent's history plus its own sub-task and depends on the
parent's step; siblings share the parent's whole prompt as a prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvroute.bench.workloads.base import BenchRequest, Draft, GenContext, finish, lognormal_len
from kvroute.bench.workloads.params import check, param
from kvroute.bench.workloads.schemas import example_of, make_schema

_TOOL_NAMES = [
    "search_docs",
    "lookup_order",
    "issue_refund",
    "update_record",
    "run_query",
    "read_file",
    "write_file",
    "send_email",
    "create_ticket",
    "fetch_url",
    "list_items",
    "get_weather",
    "translate_text",
    "summarize",
]


@dataclass(slots=True)
class _Actor:
    session_id: str
    history: list[dict[str, Any]]
    steps_left: int
    last: int | None


@dataclass(frozen=True, slots=True)
class AgentWorkload:
    num_tools: int = param(8, "tools described in the system prompt")
    tool_depth: int = param(2, "nesting depth of each tool's parameter schema")
    system_tokens: int = param(384, "instructions before the tool schemas, tokens")
    steps: float = param(6.0, "mean steps (requests) per agent task (geometric)")
    tool_result_tokens: int = param(96, "mean tool result length, tokens")
    branch_prob: float = param(0.25, "chance that a step forks sub-agents")
    branch_factor: int = param(2, "sub-agents per fork")
    sub_steps: int = param(2, "steps each sub-agent runs")
    concurrent_agents: int = param(4, "agent tasks open at once (their steps interleave)")
    output_tokens: int = param(64, "max_tokens of each step")
    think_s: float = param(
        0.05, "pause between a step's answer and the next step (tool time), seconds"
    )
    send_tools: bool = param(False, "also send the schemas in the request's tools field")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(
            1 <= self.num_tools <= len(_TOOL_NAMES),
            f"agent: num_tools must be 1..{len(_TOOL_NAMES)}",
        )
        check(self.tool_depth >= 1 and self.steps >= 1, "agent: tool_depth and steps must be ≥ 1")
        check(0.0 <= self.branch_prob <= 1.0, "agent: branch_prob must be in [0, 1]")
        run = _AgentRun(self, ctx)
        actors = run.actors
        while len(run.drafts) < num_requests:
            run.open_tasks()
            k = int(ctx.rng.integers(0, len(actors)))
            actor = actors[k]
            run.step(actor)
            if actor.steps_left <= 0:
                actors.pop(k)
            if "." not in actor.session_id and ctx.rng.random() < self.branch_prob:
                run.fork(actor)
        return finish("agent", run.drafts[:num_requests], ctx.tokenizer)


class _AgentRun:
    """One generation: the tool schemas and system prompt, the open actors (agent tasks
    and their sub-agents) and the drafts so far. Every draw comes from ``ctx.rng``, in
    the order the steps happen, so a seed gives one schedule."""

    def __init__(self, workload: AgentWorkload, ctx: GenContext) -> None:
        self.workload = workload
        self.text, self.rng = ctx.text, ctx.rng
        self.tools: list[dict[str, Any]] = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": self.text.tokens(16),
                    "parameters": make_schema(self.rng, workload.tool_depth),
                },
            }
            for name in _TOOL_NAMES[: workload.num_tools]
        ]
        self.system = (
            "You are an autonomous agent. Solve the task step by step. To call a tool, answer "
            'only with <tool_call>{"name": ..., "arguments": {...}}</tool_call>. '
            + self.text.tokens(workload.system_tokens)
            + "\n\nTools:\n"
            + json.dumps(self.tools, separators=(",", ":"))
        )
        self.actors: list[_Actor] = []
        self.drafts: list[Draft] = []
        self.num_tasks = 0

    def open_tasks(self) -> None:
        """Start agent tasks until ``concurrent_agents`` top-level ones are open."""
        w, text = self.workload, self.text
        while len([a for a in self.actors if "." not in a.session_id]) < w.concurrent_agents:
            self.num_tasks += 1
            task = f"{text.tag('Task ')}: {text.tokens(40)}"
            self.actors.append(
                _Actor(
                    f"a{self.num_tasks}",
                    [{"role": "system", "content": self.system}, {"role": "user", "content": task}],
                    int(self.rng.geometric(1.0 / w.steps)),
                    None,
                )
            )

    def step(self, actor: _Actor) -> None:
        """The actor's next request, then its tool call and the tool's result."""
        w, text, rng, tools = self.workload, self.text, self.rng, self.tools
        body: dict[str, Any] = {"messages": [dict(m) for m in actor.history]}
        if w.send_tools:
            body["tools"] = tools
        self.drafts.append(
            Draft(
                body=body,
                max_tokens=w.output_tokens,
                session_id=actor.session_id,
                depends_on=actor.last,
                think_s=w.think_s if actor.last is not None else 0.0,
            )
        )
        actor.last = len(self.drafts) - 1
        tool = tools[int(rng.integers(0, len(tools)))]["function"]
        call_id = text.tag("call_")
        call = {"name": tool["name"], "arguments": example_of(tool["parameters"], text)}
        actor.history.append(
            {"role": "assistant", "content": f"<tool_call>{json.dumps(call)}</tool_call>"}
        )
        result = text.tokens(lognormal_len(rng, w.tool_result_tokens, 0.5, lo=4))
        actor.history.append({"role": "tool", "tool_call_id": call_id, "content": result})
        actor.steps_left -= 1

    def fork(self, actor: _Actor) -> None:
        """``branch_factor`` sub-agents from the actor's history, each with a sub-task."""
        w = self.workload
        for j in range(w.branch_factor):
            history = [dict(m) for m in actor.history]
            history.append({"role": "user", "content": f"Sub-task {j + 1}: {self.text.tokens(24)}"})
            self.actors.append(
                _Actor(f"{actor.session_id}.{actor.last}.{j}", history, w.sub_steps, actor.last)
            )
