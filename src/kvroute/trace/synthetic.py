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


def sample_text(rng: np.random.Generator, num_words: int) -> str:
    """``num_words`` words of the sample's vocabulary, as sentences."""
    return _text(rng, num_words)


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
    agents = _AgentSessions(rng)
    rag = _Rag(rng)
    t = 1_764_504_000.0
    for _i in range(num_requests):
        t += float(rng.exponential(1.0 / rate_per_s))
        kind = int(rng.choice(4, p=weights))
        body: dict[str, Any] = {"model": "smollm2-135m-instruct"}
        session: str | None = None
        answer = _text(rng, int(rng.integers(15, 70)))
        if kind == 0:
            session = agents.turn(body, answer)
        elif kind == 1:
            rag.request(body)
        elif kind == 2:
            body["messages"] = [{"role": "user", "content": _text(rng, int(rng.integers(10, 60)))}]
        else:
            code = _text(rng, int(rng.integers(150, 500)), _CODE_WORDS)
            body["messages"] = [{"role": "user", "content": "Complete this code:\n" + code}]
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


class _AgentSessions:
    """The sample's agent sessions: one system prompt and tool list, up to 12 messages a
    session; a turn continues an open session (70 %) or opens one."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.system = "You are the support agent for Acme Cloud. " + _text(rng, 320)
        self.tools = _tools(rng)
        self.live: list[tuple[str, list[dict[str, Any]]]] = []
        self.next_session = 0

    def turn(self, body: dict[str, Any], answer: str) -> str:
        """Fill ``body`` with a session's next turn; returns the session id."""
        rng = self.rng
        if self.live and rng.random() < 0.7:
            session, history = self.live[int(rng.integers(0, len(self.live)))]
        else:
            session = f"agent-{self.next_session}"
            self.next_session += 1
            history = [{"role": "system", "content": self.system}]
            self.live.append((session, history))
        history.append({"role": "user", "content": _text(rng, int(rng.integers(8, 40)))})
        body["messages"] = [dict(x) for x in history]
        body["tools"] = self.tools
        history.append({"role": "assistant", "content": answer})
        if len(history) > 12:
            self.live = [s for s in self.live if s[0] != session]
        return session


class _Rag:
    """The sample's retrieval requests: one system prompt, three of 24 documents and a
    question; 30 % ask for a JSON answer."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.system = "Answer using only the documents below. Cite the document number. " + _text(
            rng, 60
        )
        self.docs = [_text(rng, int(rng.integers(80, 200))) for _ in range(24)]

    def request(self, body: dict[str, Any]) -> None:
        rng, docs = self.rng, self.docs
        picked = rng.choice(len(docs), size=3, replace=False)
        context = "\n\n".join(f"Document {int(d)}: {docs[int(d)]}" for d in sorted(picked))
        question = _text(rng, int(rng.integers(8, 25)))
        body["messages"] = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": f"{context}\n\nQuestion: {question}"},
        ]
        if rng.random() < 0.3:
            body["response_format"] = {"type": "json_object"}
