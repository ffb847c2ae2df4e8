"""Local engine management against real llama-servers: up, status, down, crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from kvroute.engines.base import HealthState
from kvroute.engines.launch import LaunchOptions
from kvroute.engines.llamacpp import LlamaCppAdapter
from kvroute.engines.local import EngineState, LocalEngines, StartProgress, free_port
from kvroute.engines.paths import LLAMA_CPP_VERSION
from kvroute.engines.process import Lifetime, StopOutcome, group_members, identify
from kvroute.engines.state import EngineRecord, StateDir
from kvroute.errors import EngineError

SMALL = LaunchOptions(parallel=1, ctx_tokens=512)

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp]


def _gone(record: EngineRecord) -> bool:
    return identify(record.pid) is None and group_members(record.pid) == []


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_text(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_up_status_down_two_replicas(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    progress: list[Sequence[StartProgress]] = []

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            engines = LocalEngines(state, client=client)
            records = await engines.up(
                "llamacpp",
                replicas=2,
                options=SMALL,
                lifetime=Lifetime.TIED_TO_PARENT,
                on_progress=progress.append,
            )
            assert len({r.port for r in records}) == 2
            assert state.records() == sorted(records, key=lambda r: r.port)
            assert all(item.health.is_ready for item in progress[-1])

            statuses = await engines.status()
            assert [s.state for s in statuses] == [EngineState.READY, EngineState.READY]
            for record in records:
                health = await LlamaCppAdapter(record.base_url, client=client).health()
                assert health.state is HealthState.READY

            results = await engines.down()
            assert [r.outcome for r in results] == [StopOutcome.STOPPED] * 2
            assert state.records() == []
            assert all(_gone(r) for r in records)
            # Health reflects the stopped engines.
            for record in records:
                health = await LlamaCppAdapter(record.base_url, client=client).health()
                assert health.state is HealthState.UNREACHABLE

    asyncio.run(run())


def test_given_port_is_used_and_a_taken_one_refused(tmp_path: Path) -> None:
    port = free_port()

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            engines = LocalEngines(StateDir(tmp_path), client=client)
            [record] = await engines.up(
                "llamacpp", options=SMALL, ports=[port], lifetime=Lifetime.TIED_TO_PARENT
            )
            assert record.base_url == f"http://127.0.0.1:{port}"
            with pytest.raises(EngineError, match=f"port {port}"):
                await engines.up("llamacpp", options=SMALL, ports=[port])
            await engines.down()

    asyncio.run(run())


def test_crashed_engine_is_stale_and_down_cleans_it(tmp_path: Path) -> None:
    async def run() -> None:
        async with httpx.AsyncClient() as client:
            engines = LocalEngines(StateDir(tmp_path), client=client)
            [record] = await engines.up("llamacpp", options=SMALL, lifetime=Lifetime.TIED_TO_PARENT)
            os.killpg(record.pid, signal.SIGKILL)  # a crash, from outside
            for _ in range(100):
                if identify(record.pid) is None:
                    break
                await asyncio.sleep(0.05)
            [status] = await engines.status()
            assert status.state is EngineState.STALE
            assert status.health is None
            [result] = await engines.down()
            assert result.outcome is StopOutcome.ALREADY_GONE
            assert await engines.status() == []

    asyncio.run(run())


def test_failed_start_leaves_nothing_behind(tmp_path: Path) -> None:
    bogus = tmp_path / f"not-a-model-{os.getpid()}.gguf"
    bogus.write_bytes(b"this is not a GGUF file" * 100)
    state = StateDir(tmp_path / "state")

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            engines = LocalEngines(state, client=client)
            with pytest.raises(EngineError) as failure:
                await engines.up("llamacpp", options=LaunchOptions(model_path=bogus))
            assert "exited while starting" in str(failure.value)
            assert failure.value.hint is not None and "end of" in failure.value.hint

    asyncio.run(run())
    assert state.records() == []
    assert _processes_mentioning(bogus.name) == []


def test_engine_killed_by_a_signal_at_start_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binary that crashes while loading (the AMX build of issue 18 died with SIGSEGV)
    is reported with its signal and its log, not as a bare exit. A real llama-server
    cannot be made to segfault on demand, so a stand-in binary plays it."""
    cache = tmp_path / "cache"
    binary = cache / "llama.cpp" / LLAMA_CPP_VERSION / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho 'load_tensors: loading model'\nsleep 0.5\nkill -SEGV $$\n")
    binary.chmod(0o755)
    (cache / "models").mkdir()
    (cache / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("KVROUTE_CACHE", str(cache))
    monkeypatch.delenv("KVROUTE_MODEL", raising=False)
    state = StateDir(tmp_path / "state")

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            engines = LocalEngines(state, client=client)
            with pytest.raises(EngineError) as failure:
                await engines.up("llamacpp", options=SMALL, ready_timeout_s=30)
            assert "exited while starting (killed by SIGSEGV)" in str(failure.value)
            assert failure.value.hint is not None
            assert "load_tensors: loading model" in failure.value.hint

    asyncio.run(run())
    assert state.records() == []


def test_interrupted_up_stops_what_it_started(tmp_path: Path) -> None:
    state = StateDir(tmp_path)

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            engines = LocalEngines(state, client=client)
            task = asyncio.create_task(engines.up("llamacpp", options=SMALL, ready_timeout_s=60))
            for _ in range(400):
                if state.records():
                    break
                await asyncio.sleep(0.005)
            [record] = state.records()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert state.records() == []
            assert _gone(record)

    asyncio.run(run())


def test_down_stops_engines_whose_up_was_killed(tmp_path: Path) -> None:
    """`up` dies by SIGKILL: its detached engines live on, and `down` stops them."""
    code = textwrap.dedent(
        f"""
        import asyncio, httpx
        from pathlib import Path
        from kvroute.engines.launch import LaunchOptions
        from kvroute.engines.local import LocalEngines
        from kvroute.engines.state import StateDir

        async def main():
            async with httpx.AsyncClient() as client:
                engines = LocalEngines(StateDir(Path({str(tmp_path)!r})), client=client)
                await engines.up("llamacpp", replicas=2, options=LaunchOptions(parallel=1, ctx_tokens=512))
                await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    state = StateDir(tmp_path)
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while len(state.records()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        records = state.records()
        assert len(records) == 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert all(identify(r.pid) is not None for r in records), "detached engines outlive `up`"

    async def run() -> None:
        async with httpx.AsyncClient() as client:
            results = await LocalEngines(state, client=client).down()
            assert [r.outcome for r in results] == [StopOutcome.STOPPED] * 2

    asyncio.run(run())
    assert state.records() == []
    assert all(_gone(r) for r in records)
