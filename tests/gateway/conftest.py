"""Fixtures for gateway tests: an event loop in a thread, fake upstreams on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture
def fake(loop_thread: LoopThread) -> Iterator[FakeUpstream]:
    upstream = FakeUpstream()
    loop_thread.run(upstream.start())
    try:
        yield upstream
    finally:
        loop_thread.run(upstream.stop())


@pytest.fixture
def fake2(loop_thread: LoopThread) -> Iterator[FakeUpstream]:
    upstream = FakeUpstream()
    loop_thread.run(upstream.start())
    try:
        yield upstream
    finally:
        loop_thread.run(upstream.stop())
