"""Running a gateway until told to stop: signals, reload, graceful drain.

SIGHUP re-reads the config file (a bad file is reported and the running config
stays); SIGTERM and SIGINT start the drain: the listener stays open, /ready answers
503, new completions get 503, requests in progress finish for up to
``listener.drain_timeout_s``, then the process exits. A second SIGTERM or SIGINT cuts
the drain short.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable

from kvroute.errors import InputError
from kvroute.gateway.app import Gateway

YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation (CPython's default: 700)."""


async def serve_until_signalled(
    gateway: Gateway,
    *,
    host: str | None = None,
    port: int | None = None,
    on_listening: Callable[[int], None] | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT; returns how many requests the drain had to cut."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    logger = logging.getLogger("kvroute.gateway")

    def reload() -> None:
        with contextlib.suppress(InputError):  # logged by the gateway; the config stays
            gateway.reload_from_file("SIGHUP")

    bound = await gateway.start(host, port)
    # Everything built so far lives as long as the process: keep it out of the cyclic
    # GC's full collections, which would otherwise scan it on the request path.
    gc.freeze()
    # A request allocates a few hundred tracked objects, nearly all freed with it; with
    # the default 700 the young generation is collected every few requests, and each
    # collection pushes the survivors (the capture worker's memos) towards the
    # full collections. 10,000 cut capture's worker CPU by about a tenth at 500 req/s
    # (bench/RESULTS.md), at no cost in memory worth counting.
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    if on_listening is not None:
        on_listening(bound)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if gateway.config_path is not None:
        loop.add_signal_handler(signal.SIGHUP, reload)

    def cut() -> None:
        if gateway.server is not None:
            logger.warning("second signal: cutting %d requests now", gateway.server.num_active)
            gateway.server.end_drain()

    try:
        await stop.wait()
        in_progress = gateway.server.num_active if gateway.server is not None else 0
        grace_s = gateway.state.config.listener.drain_grace_s
        if grace_s and not in_progress:
            logger.info(
                "draining: /ready answers 503 for %g s before the listener closes "
                "(signal again to stop now)",
                grace_s,
            )
        if in_progress:
            logger.info(
                "draining: %d requests in progress may finish within %g s "
                "(/ready answers 503; signal again to stop now)",
                in_progress,
                gateway.state.config.listener.drain_timeout_s,
            )
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, cut)
        return await gateway.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)
