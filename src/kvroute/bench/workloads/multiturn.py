"""``multiturn``: chat sessions that re-send their whole history every turn.

Turn *k* of a session is its system prompt, every earlier user message and answer, and
a new user message, so most of each prompt is the previous prompt plus the previous
answer. The answers in the history are pre-generated text of ``answer_tokens`` tokens
(not what the engine said), which keeps the schedule fixed before the run; the engine
still reuses the history's prompt part. Turn *k+1* depends on turn *k*: the runner
sends it no earlier than ``think_s`` after turn *k* ends.

``concurrent_sessions`` sessions are open at a time and their turns interleave, as
they would from that many users; a finished session is replaced by a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvroute.bench.workloads.base import BenchRequest, Draft, GenContext, finish, lognormal_len
from kvroute.bench.workloads.params import check, param


@dataclass(slots=True)
class _Session:
    session_id: str
    history: list[dict[str, Any]]
    turns_left: int
    last: int | None = None


@dataclass(frozen=True, slots=True)
class MultiturnWorkload:
    turns: float = param(5.0, "mean turns per session (geometric, at least 1)")
    concurrent_sessions: int = param(8, "sessions open at once (their turns interleave)")
    system_tokens: int = param(256, "system prompt length, tokens")
    shared_system: bool = param(True, "one system prompt for all sessions (else one each)")
    user_tokens: int = param(48, "mean user message length, tokens")
    answer_tokens: int = param(96, "answer length in the history, and max_tokens")
    think_s: float = param(1.0, "pause between an answer and the next turn, seconds")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(
            self.turns >= 1 and self.concurrent_sessions >= 1,
            "multiturn: turns and concurrent_sessions must be ≥ 1",
        )
        text = ctx.text
        shared = text.tokens(self.system_tokens)
        open_sessions: list[_Session] = []
        drafts: list[Draft] = []
        num_started = 0

        def new_session() -> _Session:
            nonlocal num_started
            num_started += 1
            system = (
                shared
                if self.shared_system
                else f"{text.tag('Persona ')}. {text.tokens(self.system_tokens)}"
            )
            return _Session(
                session_id=f"s{num_started}",
                history=[{"role": "system", "content": system}],
                turns_left=int(ctx.rng.geometric(1.0 / self.turns)),
            )

        while len(drafts) < num_requests:
            while len(open_sessions) < self.concurrent_sessions:
                open_sessions.append(new_session())
            k = int(ctx.rng.integers(0, len(open_sessions)))
            s = open_sessions[k]
            user = f"{text.tag('#')} {text.tokens(lognormal_len(ctx.rng, self.user_tokens, 0.4, lo=2))}"
            s.history.append({"role": "user", "content": user})
            drafts.append(
                Draft(
                    body={"messages": [dict(m) for m in s.history]},
                    max_tokens=self.answer_tokens,
                    session_id=s.session_id,
                    depends_on=s.last,
                    think_s=self.think_s if s.last is not None else 0.0,
                )
            )
            s.last = len(drafts) - 1
            s.history.append({"role": "assistant", "content": text.tokens(self.answer_tokens)})
            s.turns_left -= 1
            if s.turns_left <= 0:
                open_sessions.pop(k)
        return finish("multiturn", drafts, ctx.tokenizer)
