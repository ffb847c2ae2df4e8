"""Local engines as managed subprocesses: start replicas, wait until ready, report, stop.

``up`` records each engine in the state directory the moment its process exists, then
waits for all of them to answer their health probe; if any fails or the wait is
interrupted (Ctrl-C, a crash of the test), everything this call started is stopped
again. ``down`` stops exactly what the records name, whole process groups, and only
processes whose pid *and* start time still match. ``status`` tells stale records
(their process is gone) from live ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from kvroute.engines.base import Health, HealthState
from kvroute.engines.launch import (
    HOST,
    CpuPlan,
    LaunchCommand,
    LaunchOptions,
    launcher_registry,
    plan_cpus,
)
from kvroute.engines.process import (
    Lifetime,
    StopOutcome,
    collect_exit,
    is_running,
    spawn,
    stop_group,
)
from kvroute.engines.registry import make_adapter
from kvroute.engines.state import EngineRecord, StateDir
from kvroute.errors import EngineError, UsageError

POLL_INTERVAL_S = 0.5
LOG_TAIL_LINES = 25


class EngineState(enum.Enum):
    """What ``status`` found for one record."""

    READY = "ready"
    STARTING = "starting"
    """The process runs but does not serve yet (loading, or not listening yet)."""
    UNHEALTHY = "unhealthy"
    """The process runs and answers its health probe with an error."""
    STALE = "stale"
    """The recorded process is gone (exited, crashed, or its pid was recycled)."""


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """One record and what its engine is doing now. ``health`` is None when stale."""

    record: EngineRecord
    state: EngineState
    health: Health | None
    uptime_s: float


@dataclass(frozen=True, slots=True)
class StartProgress:
    """One replica's state during ``up``'s wait, reported after every poll."""

    record: EngineRecord
    elapsed_s: float
    health: Health


@dataclass(frozen=True, slots=True)
class StopResult:
    record: EngineRecord
    outcome: StopOutcome


ProgressCallback = Callable[[Sequence[StartProgress]], None]


class LocalEngines:
    """Engines recorded in ``state``; health probes go through ``client``.

    ``env`` is the environment engines inherit (default: this process's), with each
    launcher's variables added.
    """

    def __init__(
        self,
        state: StateDir,
        *,
        client: httpx.AsyncClient,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._state = state
        self._client = client
        self._env = dict(os.environ if env is None else env)

    async def up(
        self,
        engine: str,
        *,
        replicas: int = 1,
        options: LaunchOptions | None = None,
        ports: Sequence[int] | None = None,
        lifetime: Lifetime = Lifetime.DETACHED,
        ready_timeout_s: float | None = None,
        on_progress: ProgressCallback | None = None,
        cpu_plan: CpuPlan | None = None,
    ) -> list[EngineRecord]:
        """Start ``replicas`` copies of ``engine`` and return once every one is ready.

        Ports are the given ones (one per replica) or free ones chosen here. Raises
        :class:`EngineError` (with the end of the failing engine's log) when a replica
        exits or is not ready within the timeout; in that case, and when interrupted,
        every replica this call started has been stopped and unrecorded again.
        ``cpu_plan``: the CPUs and threads of each replica (default: :func:`plan_cpus`
        over the CPUs this process may use); its threads replace ``options.threads``.
        """
        launcher = launcher_registry().get(engine)
        options = options or LaunchOptions()
        chosen = self._choose_ports(replicas, ports)
        cpu_plan = cpu_plan or plan_cpus(available_cpus(), replicas, options.threads)
        if len(cpu_plan.cpu_sets) != replicas:
            raise EngineError(
                f"the CPU plan is for {len(cpu_plan.cpu_sets)} replicas, not {replicas}"
            )
        options = replace(options, threads=cpu_plan.threads)
        cpu_sets = cpu_plan.cpu_sets
        commands = [
            launcher.command(
                port=port, options=options, cpus=cpus, run_dir=self._state.run_dir(engine, port)
            )
            for port, cpus in zip(chosen, cpu_sets, strict=True)
        ]
        started: list[EngineRecord] = []
        try:
            for port, command, cpus in zip(chosen, commands, cpu_sets, strict=True):
                started.append(self._start(engine, port, command, options, cpus, lifetime))
            timeout_s = ready_timeout_s or max(c.ready_timeout_s for c in commands)
            await self._wait_ready(started, timeout_s, on_progress)
        except BaseException:
            await asyncio.shield(self._stop_all(started))
            raise
        return started

    async def status(self, engine: str | None = None) -> list[EngineStatus]:
        """Every recorded engine (of ``engine`` only, if given) and its state now."""
        records = self._records(engine)
        healths = await asyncio.gather(*(self._probe(r) for r in records))
        now = time.time()
        return [
            EngineStatus(
                record=r,
                state=_state_of(h),
                health=h,
                uptime_s=max(0.0, now - r.started_at_unix_s),
            )
            for r, h in zip(records, healths, strict=True)
        ]

    async def down(self, engine: str | None = None, *, timeout_s: float = 30.0) -> list[StopResult]:
        """Stop every recorded engine (of ``engine`` only, if given) and remove its
        record; stale records are removed without signalling anything."""
        return await self._stop_all(self._records(engine), timeout_s=timeout_s)

    def records(self, engine: str | None = None) -> list[EngineRecord]:
        """The recorded engines, as stored; no process is looked at."""
        return self._records(engine)

    def _records(self, engine: str | None) -> list[EngineRecord]:
        if engine is not None:
            launcher_registry().get(engine)  # an unknown name is an error, not "none"
        return [r for r in self._state.records() if engine is None or r.engine == engine]

    def _start(
        self,
        engine: str,
        port: int,
        command: LaunchCommand,
        options: LaunchOptions,
        cpus: Sequence[int],
        lifetime: Lifetime,
    ) -> EngineRecord:
        run_dir = self._state.run_dir(engine, port)
        (run_dir / "slots").mkdir(parents=True, exist_ok=True)
        log_path = self._state.log_path(engine, port)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")  # a fresh log per start; an older one with this port goes
        proc = spawn(
            command.argv, env={**self._env, **command.env}, log_path=log_path, lifetime=lifetime
        )
        record = EngineRecord(
            engine=engine,
            port=port,
            base_url=f"http://{HOST}:{port}",
            model_name=options.model_name,
            pid=proc.pid,
            start_ticks=proc.start_ticks,
            started_at_unix_s=time.time(),
            log_path=str(log_path),
            argv=command.argv,
            threads=options.threads,
            cpus=tuple(cpus),
        )
        try:
            self._state.add(record)
        except OSError as exc:  # never leave a process that no record names
            stop_group(proc)
            raise EngineError(
                f"could not record {record.name} in {self._state.root}: {exc}"
            ) from exc
        return record

    async def _wait_ready(
        self,
        records: Sequence[EngineRecord],
        timeout_s: float,
        on_progress: ProgressCallback | None,
    ) -> None:
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            healths = await asyncio.gather(*(self._probe(r) for r in records))
            if on_progress is not None:
                on_progress(
                    [
                        StartProgress(r, elapsed, h or _GONE)
                        for r, h in zip(records, healths, strict=True)
                    ]
                )
            for record, health in zip(records, healths, strict=True):
                if health is None:
                    ended = collect_exit(record.process)
                    how = f" ({ended.describe()})" if ended is not None else ""
                    raise EngineError(
                        f"{record.name} exited while starting{how}",
                        hint=f"end of {record.log_path}:\n{tail_log(Path(record.log_path))}",
                    )
            if all(h is not None and h.is_ready for h in healths):
                return
            if elapsed > timeout_s:
                waiting = [
                    r for r, h in zip(records, healths, strict=True) if not (h and h.is_ready)
                ]
                raise EngineError(
                    f"{waiting[0].name} not ready after {timeout_s:.0f} s",
                    hint=f"end of {waiting[0].log_path}:\n{tail_log(Path(waiting[0].log_path))}",
                )
            await asyncio.sleep(POLL_INTERVAL_S)

    async def _probe(self, record: EngineRecord) -> Health | None:
        """The engine's health, or None when its process is gone (a stale record)."""
        if not is_running(record.process):
            return None
        return await make_adapter(record.engine, record.base_url, client=self._client).health()

    async def _stop_all(
        self, records: Sequence[EngineRecord], *, timeout_s: float = 30.0
    ) -> list[StopResult]:
        outcomes = await asyncio.gather(
            *(asyncio.to_thread(stop_group, r.process, timeout_s=timeout_s) for r in records)
        )
        for record in records:
            self._state.remove(record)
        return [StopResult(r, o) for r, o in zip(records, outcomes, strict=True)]

    def _choose_ports(self, replicas: int, ports: Sequence[int] | None) -> list[int]:
        if replicas < 1:
            raise UsageError(f"--replicas must be ≥ 1 (got {replicas})")
        taken = {r.port for r in self._state.records()}
        if ports:
            if len(ports) != replicas:
                raise UsageError(
                    f"{len(ports)} port{'' if len(ports) == 1 else 's'} given for "
                    f"{replicas} replica{'' if replicas == 1 else 's'}"
                )
            for port in ports:
                if port in taken or not port_is_free(port):
                    raise EngineError(f"port {port} on {HOST} is in use")
            return list(ports)
        chosen: list[int] = []
        while len(chosen) < replicas:
            port = free_port()
            if port not in taken and port not in chosen:
                chosen.append(port)
        return chosen


_GONE = Health(HealthState.UNREACHABLE, "process exited")


def _state_of(health: Health | None) -> EngineState:
    if health is None:
        return EngineState.STALE
    if health.state is HealthState.READY:
        return EngineState.READY
    if health.state is HealthState.UNHEALTHY:
        return EngineState.UNHEALTHY
    return EngineState.STARTING


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def tail_log(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist)."""
    with contextlib.suppress(FileNotFoundError):
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])
    return ""


def available_cpus() -> list[int]:
    """The CPU ids this process may run on (its affinity mask, not the machine's count)."""
    return sorted(os.sched_getaffinity(0))
