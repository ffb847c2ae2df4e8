"""Serving on a schedule, through a stand-in for the engine's HTTP endpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from kvroute.errors import EngineError
from kvroute.types import JSONValue
from kvroute.validate.result import Answer, CompletionPath
from kvroute.validate.serve import Post, serve


def _work(n: int) -> list[tuple[CompletionPath, dict[str, JSONValue]]]:
    return [(CompletionPath.COMPLETIONS, {"prompt": str(i)}) for i in range(n)]


class Engine:
    """Answers after a per-request delay; records send times and how many ran at once."""

    def __init__(self, delays_s: list[float], fail_index: int | None = None) -> None:
        self.delays_s = delays_s
        self.fail_index = fail_index
        self.sends: list[tuple[float, int]] = []
        self.running = 0
        self.most_running = 0

    async def post(self, endpoint: CompletionPath, body: dict[str, JSONValue]) -> Mapping[str, Any]:
        i = int(str(body["prompt"]))
        self.sends.append((time.monotonic(), i))
        if i == self.fail_index:
            raise EngineError(f"request {i} failed")
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(self.delays_s[i])
        self.running -= 1
        return {"echo": i}


def _serve(engine: Engine, n: int, **kwargs: Any) -> list[Answer]:
    post: Post = engine.post
    return asyncio.run(serve(_work(n), post, **kwargs))


def test_closed_loop_sends_in_trace_order_apart_with_n_clients() -> None:
    engine = Engine([0.06, 0.01, 0.03, 0.01, 0.02, 0.01])
    answers = _serve(engine, 6, arrivals_s=None, concurrency=2, send_gap_s=0.02)
    assert [a.body["echo"] for a in answers] == list(range(6))  # trace order, every answer
    assert [i for _, i in engine.sends] == list(range(6))
    gaps = np.diff([t for t, _ in engine.sends])
    assert (gaps >= 0.02 - 1e-3).all()
    assert engine.most_running == 2
    assert all(a.done_s > a.sent_s for a in answers)


def test_arrivals_are_kept_and_spread_by_the_send_gap() -> None:
    engine = Engine([0.01, 0.01, 0.01])
    answers = _serve(engine, 3, arrivals_s=[0.0, 0.1, 0.1], concurrency=1, send_gap_s=0.03)
    sent = [a.sent_s for a in answers]
    assert sent[1] >= 0.1 - 1e-3
    assert sent[2] >= sent[1] + 0.03 - 1e-3  # due together, sent apart, in trace order


def test_a_failed_request_is_raised_as_itself() -> None:
    """The CLI maps an EngineError to its message and exit code; a group would not be."""
    engine = Engine([0.01] * 4, fail_index=2)
    with pytest.raises(EngineError, match="request 2 failed"):
        _serve(engine, 4, arrivals_s=None, concurrency=2)
