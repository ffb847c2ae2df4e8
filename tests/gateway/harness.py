"""A gateway and fake upstreams running in a background thread's event loop, so tests
(and the synchronous ``openai`` SDK) talk to them over real sockets."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

from kvroute.gateway.app import Gateway
from kvroute.gateway.config.gateway import GatewayConfig, parse_config

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()  # its self-pipe's sockets too (else a ResourceWarning later)


class RunningGateway:
    def __init__(self, loop: LoopThread, gateway: Gateway, port: int) -> None:
        self.loop, self.gateway, self.port = loop, gateway, port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def running_gateway(
    loop: LoopThread, config: GatewayConfig | str, **kwargs: Any
) -> Iterator[RunningGateway]:
    """Start a gateway on a free port in ``loop``; stop it (drain 1 s) afterwards."""
    if isinstance(config, str):
        config = parse_config(config, "test.yaml")

    async def start() -> RunningGateway:
        gateway = Gateway(config, **kwargs)
        port = await gateway.start("127.0.0.1", 0)
        return RunningGateway(loop, gateway, port)

    running = loop.run(start())
    try:
        yield running
    finally:
        loop.run(running.gateway.stop(1.0))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve_subprocess(
    config: Path, port: int, *args: str, stderr: IO[str] | int | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``kvroute serve --config CONFIG ARGS`` in a process of its own (signals, exit
    codes, stderr), ready once ``/health`` on ``port`` answers; killed afterwards if
    it is still running."""
    argv = [sys.executable, "-c", "from kvroute.cli.serve import serve_cmd; serve_cmd()"]
    proc = subprocess.Popen([*argv, "--config", str(config), *args], stderr=stderr, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
