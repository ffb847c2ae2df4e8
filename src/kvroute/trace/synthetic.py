"""A deterministic sample of chat traffic, written as an OpenAI request log.

It gives ``kvroute analyze`` something realistic to chew on with no data of your own:
a mix of the traffic shapes that decide engine choice — a support agent with a long
system prompt and tool schemas in multi-turn sessions, RAG requests over a shared
template and a small document pool, one-off questions, and low-overlap code
completion. Same ``seed``, same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

_WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "for",
    "on",
    "with",
    "by",
    "from",
    "at",
    "as",
    "is",
    "are",
    "was",
    "be",
    "this",
    "that",
    "these",
    "those",
    "it",
    "its",
    "we",
    "you",
    "they",
    "order",
    "account",
    "invoice",
    "refund",
    "shipping",
    "delivery",
    "address",
    "payment",
    "card",
    "plan",
    "upgrade",
    "cancel",
    "renew",
    "password",
    "login",
    "error",
    "timeout",
    "request",
    "response",
    "server",
    "client",
    "cache",
    "memory",
    "latency",
    "throughput",
    "model",
    "token",
    "prompt",
    "context",
    "window",
    "batch",
    "queue",
    "replica",
    "gateway",
    "route",
    "policy",
    "health",
    "metric",
    "please",
    "thanks",
    "could",
    "would",
    "should",
    "can",
    "will",
    "may",
    "must",
    "need",
    "want",
    "check",
    "update",
    "show",
    "list",
    "find",
    "customer",
    "support",
    "ticket",
    "issue",
    "problem",
    "status",
    "priority",
    "agent",
    "tool",
    "result",
    "summary",
    "report",
    "table",
    "data",
    "file",
    "record",
    "field",
    "value",
    "number",
    "date",
    "time",
    "week",
    "month",
    "year",
    "today",
    "yesterday",
    "tomorrow",
    "quick",
    "small",
    "large",
    "fast",
    "slow",
    "new",
    "old",
    "first",
    "last",
    "next",
    "previous",
    "other",
    "same",
    "different",
    "every",
    "because",
    "however",
    "therefore",
    "also",
    "only",
    "just",
    "still",
    "already",
    "yet",
    "again",
    "then",
    "when",
    "where",
    "why",
    "how",
]

_CODE_WORDS = [
    "def",
    "class",
    "return",
    "if",
    "else",
    "elif",
    "for",
    "while",
    "import",
    "from",
    "self",
    "None",
    "True",
    "False",
    "try",
    "except",
    "raise",
    "with",
    "as",
    "lambda",
    "yield",
    "async",
    "await",
    "print",
    "len",
    "range",
    "dict",
    "list",
    "set",
    "tuple",
    "int",
    "str",
    "float",
    "bool",
    "value",
    "result",
    "items",
    "key",
    "data",
    "config",
    "path",
    "name",
    "index",
    "count",
    "total",
    "buffer",
    "offset",
    "size",
]


@dataclass(frozen=True, slots=True)
class SampleMix:
    """Weights of each traffic kind in the sample (normalised)."""

    agent_sessions: float = 0.35
    rag: float = 0.30
    qa: float = 0.20
    code: float = 0.15


def _text(
    rng: np.random.Generator, num_words: int, words: list[str] | tuple[str, ...] = _WORDS
) -> str:
    idx = rng.integers(0, len(words), size=num_words)
    out: list[str] = []
    for i, w in enumerate(idx):
        word = words[w]
        out.append(word.capitalize() if i == 0 or out[-1].endswith(".") else word)
        if i % 13 == 12:
            out[-1] += "."
    return " ".join(out) + "."


def _tools(rng: np.random.Generator) -> list[dict[str, Any]]:
    names = ["lookup_order", "issue_refund", "update_address", "search_kb", "escalate_ticket"]
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": _text(rng, 18),
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"arg_{j}": {"type": "string", "description": _text(rng, 8)}
                        for j in range(3)
                    },
                    "required": ["arg_0"],
                },
            },
        }
        for name in names
    ]


def sample_log(
    num_requests: int = 600, *, seed: int = 0, rate_per_s: float = 4.0, mix: SampleMix | None = None
) -> Iterator[dict[str, Any]]:
    """Yield OpenAI-log records (wrapped: timestamp, session, request, response)."""
    m = mix or SampleMix()
    rng = np.random.default_rng(seed)
    weights = np.array([m.agent_sessions, m.rag, m.qa, m.code], dtype=np.float64)
    weights /= weights.sum()
    agent_system = "You are the support agent for Acme Cloud. " + _text(rng, 320)
    tools = _tools(rng)
    rag_system = "Answer using only the documents below. Cite the document number. " + _text(
        rng, 60
    )
    docs = [_text(rng, int(rng.integers(80, 200))) for _ in range(24)]
    start = 1_764_504_000.0
    t = start
    live: list[tuple[str, list[dict[str, Any]]]] = []  # open agent sessions
    next_session = 0
    for _i in range(num_requests):
        t += float(rng.exponential(1.0 / rate_per_s))
        kind = int(rng.choice(4, p=weights))
        body: dict[str, Any] = {"model": "smollm2-135m-instruct"}
        session: str | None = None
        answer = _text(rng, int(rng.integers(15, 70)))
        if kind == 0:
            if live and rng.random() < 0.7:
                k = int(rng.integers(0, len(live)))
                session, history = live[k]
            else:
                session = f"agent-{next_session}"
                next_session += 1
                history = [{"role": "system", "content": agent_system}]
                live.append((session, history))
            history.append({"role": "user", "content": _text(rng, int(rng.integers(8, 40)))})
            body["messages"] = [dict(x) for x in history]
            body["tools"] = tools
            history.append({"role": "assistant", "content": answer})
            if len(history) > 12:
                live = [s for s in live if s[0] != session]
        elif kind == 1:
            picked = rng.choice(len(docs), size=3, replace=False)
            context = "\n\n".join(f"Document {int(d)}: {docs[int(d)]}" for d in sorted(picked))
            body["messages"] = [
                {"role": "system", "content": rag_system},
                {
                    "role": "user",
                    "content": f"{context}\n\nQuestion: {_text(rng, int(rng.integers(8, 25)))}",
                },
            ]
            if rng.random() < 0.3:
                body["response_format"] = {"type": "json_object"}
        elif kind == 2:
            body["messages"] = [{"role": "user", "content": _text(rng, int(rng.integers(10, 60)))}]
        else:
            body["messages"] = [
                {
                    "role": "user",
                    "content": "Complete this code:\n"
                    + _text(rng, int(rng.integers(150, 500)), _CODE_WORDS),
                }
            ]
        out_tokens = math.ceil(len(answer.split()) * 1.3)
        latency = 0.05 + out_tokens / 120.0
        yield {
            "timestamp": round(t, 3),
            "end_timestamp": round(t + latency, 3),
            "session_id": session,
            "request": body,
            "response": {
                "choices": [{"message": {"role": "assistant", "content": answer}}],
                "usage": {"completion_tokens": out_tokens},
            },
        }
