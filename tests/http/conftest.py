"""Fixtures for the HTTP layer's tests: an event loop in a thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.harness import LoopThread


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    try:
        yield loop
    finally:
        loop.close()
