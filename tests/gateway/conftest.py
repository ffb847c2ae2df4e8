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


@pytest.fixture(autouse=True)
def _trace_key_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capture keys its hashes with the trace key file under $XDG_CONFIG_HOME (made on
    first use): one per test session, never the user's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "config"))
