"""Open-loop sending: each request written at its intended time, from a timer callback.

The request is written in the callback the loop's timer runs, not in a task the timer
wakes (which would resume one loop step later, behind every I/O callback of that
step). A callback sends every slot already due, then arms the timer for the next one
``spin_s`` early: the loop's timers wake at whole milliseconds (epoll's timeout,
rounded up), so from there it polls (``call_soon``: the loop keeps reading streams in
between) until the deadline. ``spin_s = 0`` never polls; polling costs CPU for up to
``spin_s`` per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from kvroute.http.client import Clock

SendFn = Callable[[int, float], None]
"""Called with (request index, offset) at the slot's time; must not block."""


class Dispatcher:
    """Calls ``send`` for each ``(index, offset)`` of ``timed`` (in order) at ``t0 +
    offset`` on ``clock``, never before; :meth:`run` returns when all were sent and
    raises what ``send`` raised."""

    def __init__(
        self,
        timed: Sequence[tuple[int, float]],
        send: SendFn,
        *,
        t0: float,
        spin_s: float,
        clock: Clock,
    ) -> None:
        self._timed = timed
        self._send = send
        self._t0 = t0
        self._spin_s = spin_s
        self._clock = clock
        self._next = 0
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[None] = self._loop.create_future()

    async def run(self) -> None:
        self._arm()
        try:
            await self._done
        finally:  # cancelled (Ctrl-C) or failed: a timer still armed must send nothing
            self._next = len(self._timed)

    def _arm(self) -> None:
        if self._next >= len(self._timed):
            if not self._done.done():
                self._done.set_result(None)
            return
        at = self._t0 + self._timed[self._next][1] - self._spin_s
        # clock and loop.time() may differ by an offset: convert
        self._loop.call_at(at + self._loop.time() - self._clock(), self._fire)

    def _fire(self) -> None:
        try:
            self._send_due()
        except BaseException as exc:  # a timer callback has no caller: hand it to run()
            if not self._done.done():
                self._done.set_exception(exc)

    def _send_due(self) -> None:
        timed, t0, clock = self._timed, self._t0, self._clock
        while self._next < len(timed):
            index, offset = timed[self._next]
            left = t0 + offset - clock()
            if left > 0:
                if left <= self._spin_s:
                    self._loop.call_soon(self._fire)
                    return
                break
            self._next += 1
            self._send(index, offset)
        self._arm()
