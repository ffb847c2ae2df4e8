"""The open-loop dispatcher: every slot sent in order, never before its time, with or
without the final spin; a failing send ends the run with its error instead of hanging."""

from __future__ import annotations

import asyncio
import time

import pytest

from kvroute.bench.client.dispatch import Dispatcher

SLOTS = [(0, 0.0), (1, 0.004), (2, 0.004), (3, 0.0125), (4, 0.02)]


@pytest.mark.parametrize("spin_s", [0.0, 0.003])
def test_sends_every_slot_in_order_and_never_early(spin_s: float) -> None:
    async def go() -> tuple[float, list[tuple[int, float, float]]]:
        sent: list[tuple[int, float, float]] = []
        t0 = time.monotonic() + 0.01

        def send(index: int, offset: float) -> None:
            sent.append((index, offset, time.monotonic()))

        await Dispatcher(SLOTS, send, t0=t0, spin_s=spin_s, clock=time.monotonic).run()
        return t0, sent

    t0, sent = asyncio.run(go())
    assert [(i, off) for i, off, _ in sent] == SLOTS
    assert all(at >= t0 + off for _, off, at in sent)


def test_a_late_start_sends_everything_due_at_once() -> None:
    async def go() -> list[int]:
        sent: list[int] = []
        t0 = time.monotonic() - 1.0  # every slot is long due

        def send(index: int, offset: float) -> None:
            sent.append(index)

        await Dispatcher(SLOTS, send, t0=t0, spin_s=0.0, clock=time.monotonic).run()
        return sent

    assert asyncio.run(go()) == [0, 1, 2, 3, 4]


def test_a_failing_send_is_raised_from_run() -> None:
    def send(index: int, offset: float) -> None:
        if index == 2:
            raise OSError("socket gone")

    async def go() -> None:
        t0 = time.monotonic()
        await Dispatcher(SLOTS, send, t0=t0, spin_s=0.0, clock=time.monotonic).run()

    with pytest.raises(OSError, match="socket gone"):
        asyncio.run(asyncio.wait_for(go(), 5))


def test_nothing_to_send_returns_at_once() -> None:
    async def go() -> None:
        await Dispatcher([], lambda i, o: None, t0=0.0, spin_s=0.0, clock=time.monotonic).run()

    asyncio.run(asyncio.wait_for(go(), 1))
