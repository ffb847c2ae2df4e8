"""The connection pool's spares: opened ahead of need, none left after close."""

from __future__ import annotations

import asyncio

from bench.fake_upstream import fake_upstream
from kvroute.bench.http1 import Target
from kvroute.bench.pool import ConnectionPool


def test_pool_keeps_spare_connections_opening_ahead_of_need() -> None:
    async def go(url: str) -> tuple[int, int, int, int]:
        pool = ConnectionPool(Target.parse(url), asyncio.get_running_loop().time, spare=2)
        assert pool.acquire_idle() is None  # nothing idle yet: two start opening
        await asyncio.sleep(0.2)
        opened_first = pool.num_opened
        conn = pool.acquire_idle()  # one taken: one more opens to keep two spare
        assert conn is not None
        await asyncio.sleep(0.2)
        opened_then = pool.num_opened
        pool.release(conn)  # never used: not reusable, closed
        pool.close()
        await asyncio.sleep(0.05)
        return opened_first, opened_then, len(pool._idle), pool._num_out

    with fake_upstream() as up:
        first, then, idle_after_close, out_after = asyncio.run(go(up.url))
    assert (first, then) == (2, 3)
    assert idle_after_close == 0 and out_after == 0
