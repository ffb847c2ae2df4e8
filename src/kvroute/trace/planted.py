"""Request logs with one known cache breaker planted, and the same log fixed.

An assistant app: a long system prompt, a tool list on some requests, users with
sessions of one to four turns. One kind of per-request content is planted in the
system prompt (or the tools) before the shared text; the *fixed* log is the same
traffic with that content after the shared part (or canonical), as a team would fix
it. ``bench/breakers_bench.py`` and the tests check that ``kvroute analyze`` finds each
kind, finds nothing in healthy logs, and predicts the fixed log's hit. Deterministic:
same seed, same records.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.formats.openai_log import OpenAILogFormat
from kvroute.trace.records import Request
from kvroute.trace.synthetic import sample_text
from kvroute.trace.tokenizer import ChatTokenizer

PLANTED_KINDS = (
    "timestamp",
    "date",
    "uuid",
    "request_id",
    "per_user_field",
    "json_key_order",
    "tool_order",
    "whitespace",
    "tool_schema_version",
)
"""Planted kinds, named as :class:`kvroute.analyze.breaker_kinds.BreakerKind` values."""

_NAMES = ["Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun"]
_PLANS = ["free", "pro", "team", "enterprise"]
_TOOLS = ["lookup_order", "issue_refund", "update_address", "search_kb", "escalate_ticket"]
_START_S = 1_764_504_000.0


@dataclass(frozen=True, slots=True)
class PlantedLogs:
    """The log with the breaker, and the fixed log (same requests, same order)."""

    kind: str
    broken: list[dict[str, Any]]
    fixed: list[dict[str, Any]]


def _tools(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": sample_text(rng, 16),
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string", "description": sample_text(rng, 6)}},
                    "required": ["id"],
                },
            },
        }
        for name in _TOOLS
    ]


class _App:
    """The shared parts, and how one request's breaker is written (broken and fixed)."""

    def __init__(self, kind: str, rng: np.random.Generator) -> None:
        self.kind = kind
        self.rng = rng
        self.system = "You are the assistant of Acme Cloud. " + sample_text(rng, 260)
        self.tools = _tools(rng)
        self.config = {"tone": "friendly", "language": "en", "max_words": 200, "format": "md"}

    def system_pair(self, i: int, t: float, user: int) -> tuple[str, str]:
        """(broken, fixed) system prompt of request ``i`` at ``t`` from ``user``."""
        rng, s = self.rng, self.system
        when = datetime.fromtimestamp(t, UTC)
        if self.kind == "timestamp":
            v = f"Current time: {when.strftime('%Y-%m-%dT%H:%M:%SZ')}."
        elif self.kind == "date":
            day = datetime.fromtimestamp(_START_S + (i // 8) * 86_400, UTC)
            v = f"Today is {day.strftime('%B')} {day.day}, {day.year}."
        elif self.kind == "uuid":
            v = f"Request {uuid.UUID(bytes=rng.bytes(16), version=4)}."
        elif self.kind == "request_id":
            v = f"trace_id: req_{rng.bytes(6).hex()}"
        elif self.kind == "per_user_field":
            v = f"You are helping {_NAMES[user]} on the {_PLANS[user % 4]} plan."
        elif self.kind == "json_key_order":
            keys = list(self.config)
            order = [keys[k] for k in rng.permutation(len(keys))]
            shuffled = json.dumps({k: self.config[k] for k in order})
            return (
                f"Settings: {shuffled}\n{s}",
                f"Settings: {json.dumps(dict(sorted(self.config.items())))}\n{s}",
            )
        elif self.kind == "whitespace":
            variant = int(rng.integers(0, 6))
            head, rest = s[:40], s[40:]
            broken = head + [" ", "  ", " \t", "\n", " \n", "   "][variant] + rest
            return broken, s
        else:
            return s, s
        return f"{v}\n{s}", f"{s}\n\n{v}"

    def tools_pair(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rng = self.rng
        if self.kind == "tool_order":
            return [self.tools[k] for k in rng.permutation(len(self.tools))], self.tools
        if self.kind == "tool_schema_version":
            rev = int(rng.integers(1, 60))
            first = json.loads(json.dumps(self.tools[0]))
            first["function"]["description"] = (
                f"(schema rev {rev}) " + first["function"]["description"]
            )
            return [first, *self.tools[1:]], self.tools
        return self.tools, self.tools


def as_requests(records: list[dict[str, Any]]) -> list[Request]:
    """The records as the ``openai`` reader reads them from a file."""
    fmt = OpenAILogFormat()
    return [r for i, rec in enumerate(records) for r in fmt.parse(rec, i, i + 1, ReadOptions())]


def planted_logs(
    kind: str, num_requests: int = 240, *, seed: int = 0, num_users: int = 10
) -> PlantedLogs:
    """A log of ``num_requests`` with ``kind`` (one of :data:`PLANTED_KINDS`, or
    ``"none"`` for a healthy log) planted, and the same log fixed."""
    if kind not in (*PLANTED_KINDS, "none"):
        raise ValueError(f"unknown planted kind {kind!r}; valid: {', '.join(PLANTED_KINDS)}, none")
    rng = np.random.default_rng(seed)
    app = _App(kind, rng)
    with_tools = kind in ("tool_order", "tool_schema_version")
    broken: list[dict[str, Any]] = []
    fixed: list[dict[str, Any]] = []
    t = _START_S
    open_sessions: list[tuple[str, int, list[dict[str, str]], list[dict[str, str]]]] = []
    for i in range(num_requests):
        t += float(rng.exponential(0.5))
        if open_sessions and rng.random() < 0.4:
            k = int(rng.integers(0, len(open_sessions)))
            sid, user, hist_b, hist_f = open_sessions[k]
        else:
            user = int(rng.integers(0, num_users))
            sb, sf = app.system_pair(i, t, user)
            sid = f"s{i}"
            hist_b, hist_f = (
                [{"role": "system", "content": sb}],
                [{"role": "system", "content": sf}],
            )
            open_sessions.append((sid, user, hist_b, hist_f))
            open_sessions = open_sessions[-6:]
        question = {"role": "user", "content": sample_text(rng, int(rng.integers(8, 30)))}
        hist_b.append(question)
        hist_f.append(question)
        body_b: dict[str, Any] = {
            "model": "smollm2-135m-instruct",
            "messages": [dict(m) for m in hist_b],
        }
        body_f: dict[str, Any] = {
            "model": "smollm2-135m-instruct",
            "messages": [dict(m) for m in hist_f],
        }
        if with_tools:
            body_b["tools"], body_f["tools"] = app.tools_pair()
        answer = sample_text(rng, int(rng.integers(10, 40)))
        hist_b.append({"role": "assistant", "content": answer})
        hist_f.append({"role": "assistant", "content": answer})
        for out, body in ((broken, body_b), (fixed, body_f)):
            out.append(
                {
                    "timestamp": round(t, 3),
                    "session_id": sid,
                    "user": f"u{user}",
                    "request": body,
                    "response": {"usage": {"completion_tokens": len(answer.split())}},
                }
            )
    return PlantedLogs(kind, broken, fixed)


TOOLS_CHAT_TEMPLATE = (
    "<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}"
    "{% if tools %}\nTools:\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template that renders the tool list into the system turn, as most
tool-calling models' templates do (SmolLM2's own template drops tools, so a tool
breaker costs nothing with it)."""


def with_tools_template(tokenizer: ChatTokenizer) -> ChatTokenizer:
    """``tokenizer``'s vocabulary with :data:`TOOLS_CHAT_TEMPLATE`."""
    return ChatTokenizer(
        tokenizer.backend,
        name=f"{tokenizer.name}+tools-template",
        chat_template=TOOLS_CHAT_TEMPLATE,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        prefix_ids=tokenizer.prefix_ids.tolist(),
        suffix_ids=tokenizer.suffix_ids.tolist(),
    )
