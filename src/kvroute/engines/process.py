"""Start, recognise and stop engine processes without ever touching someone else's.

An engine runs as the leader of its own process group (its own session), so one
signal reaches it and every process it spawned (vLLM's engine-core worker), and a
Ctrl-C in the terminal that started it does not. A pid alone is not an identity:
pids are recycled. :class:`ProcessId` pairs it with the process start time the kernel
keeps in ``/proc/<pid>/stat``; a process with the same pid but another start time is
not ours, and nothing is sent to it.

Linux only (``/proc``, ``prctl``), like the engines this starts.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvroute.errors import EngineError

PROC = Path("/proc")

_TIE_SHIM = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):  # the parent died before prctl took effect
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


@dataclass(frozen=True, slots=True)
class ProcessId:
    """A process as the kernel knows it: pid plus start time in clock ticks since boot."""

    pid: int
    start_ticks: int


@dataclass(frozen=True, slots=True)
class _Stat:
    state: str
    pgid: int
    start_ticks: int


class Lifetime(enum.Enum):
    """How long a started engine lives."""

    DETACHED = "detached"
    """Until stopped: outlives the command that started it (``kvroute engines up``)."""
    TIED_TO_PARENT = "tied-to-parent"
    """Also ends when the starting process dies, even by SIGKILL (test fixtures)."""


class StopOutcome(enum.Enum):
    """What :func:`stop_group` found and did."""

    STOPPED = "stopped"
    """It was running and is now gone, with every process of its group."""
    ALREADY_GONE = "already-gone"
    """Nothing of it was running any more (crashed, or stopped by someone else)."""
    NOT_OURS = "not-ours"
    """The pid now belongs to another process (recycled); nothing was signalled."""


def _read_stat(pid: int) -> _Stat | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); pgrp is field 5; starttime is field 22.
    return _Stat(state=fields[0], pgid=int(fields[2]), start_ticks=int(fields[19]))


def identify(pid: int) -> ProcessId | None:
    """The identity of the live process ``pid`` now, or None if there is none."""
    stat = _read_stat(pid)
    if stat is None or stat.state in ("Z", "X"):
        return None
    return ProcessId(pid=pid, start_ticks=stat.start_ticks)


def is_running(proc: ProcessId) -> bool:
    """True when ``proc`` still runs: same pid, same start time, not a zombie."""
    return identify(proc.pid) == proc


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes in process group ``pgid``."""
    members: list[int] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is not None and stat.pgid == pgid and stat.state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    lifetime: Lifetime,
) -> ProcessId:
    """Start ``argv`` as the leader of a new session, output appended to ``log_path``.

    ``env`` is the whole environment of the child. Raises :class:`EngineError` when the
    program cannot be executed. With :attr:`Lifetime.TIED_TO_PARENT` the engine gets
    SIGTERM when the *thread* that called this ends (the kernel's parent-death signal
    follows the thread), so call it from the main thread or an event loop's thread.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = list(argv)
    if lifetime is Lifetime.TIED_TO_PARENT:
        # A shim sets the parent-death signal, then execs the engine under the same
        # pid. (preexec_fn would do the same but is unsafe in a threaded parent.)
        command = [sys.executable, "-c", _TIE_SHIM, str(os.getpid()), *command]
    with log_path.open("ab") as log:
        try:
            child = subprocess.Popen(
                command,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise EngineError(f"could not start {argv[0]}: {exc}") from exc
    proc = identify(child.pid)
    if proc is None:  # exited at once; reap it and report
        child.wait()
        raise EngineError(
            f"{argv[0]} exited at once ({_describe_returncode(child.returncode)})",
            hint=f"see {log_path}",
        )
    # The Popen object is dropped on purpose: the engine is tracked by ProcessId, so a
    # later process (``kvroute engines down``) can stop it. Reaping is done in stop_group.
    return proc


def stop_group(proc: ProcessId, *, timeout_s: float = 30.0) -> StopOutcome:
    """Stop ``proc`` and every process in its group: SIGTERM, then SIGKILL after
    ``timeout_s``. Returns only when none of them is left.

    The group is signalled only while it is provably ours: its leader is ``proc`` (pid
    and start time), or the leader is gone and members remain (the kernel does not hand
    out a pid while a group of that id lives, so the members are the leader's).
    """
    leader = identify(proc.pid)
    if leader is not None and leader != proc:
        return StopOutcome.NOT_OURS
    if leader is None and not group_members(proc.pid):
        _reap(proc.pid)
        return StopOutcome.ALREADY_GONE
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(proc.pid)
        if not group_members(proc.pid):
            return StopOutcome.STOPPED
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    for _ in range(100):
        _reap(proc.pid)
        if not group_members(proc.pid):
            return StopOutcome.STOPPED
        time.sleep(0.1)
    raise EngineError(f"process group {proc.pid} survived SIGKILL")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How an engine process ended: its exit code, or the signal that killed it."""

    code: int | None
    signal: signal.Signals | None

    def describe(self) -> str:
        """``'killed by SIGSEGV'`` or ``'exited with status 1'``."""
        if self.signal is not None:
            return f"killed by {self.signal.name}"
        return f"exited with status {self.code}"


def _describe_returncode(returncode: int) -> str:
    """Popen's returncode (minus the signal number for a death by signal) in words."""
    if returncode < 0:
        try:
            return ExitStatus(code=None, signal=signal.Signals(-returncode)).describe()
        except ValueError:
            pass
    return ExitStatus(code=returncode, signal=None).describe()


def collect_exit(proc: ProcessId) -> ExitStatus | None:
    """Reap ``proc`` if it has ended and is this process's child; how it ended.

    None when it still runs, is not our child (started by another ``kvroute``), or was
    reaped already. Reaping removes the zombie, so call it once, when the exit is seen.
    """
    stat = _read_stat(proc.pid)
    if stat is None or stat.start_ticks != proc.start_ticks or stat.state != "Z":
        return None
    try:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    if pid == 0:
        return None
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return ExitStatus(code=None, signal=signal.Signals(number))
        except ValueError:
            return ExitStatus(code=128 + number, signal=None)
    return ExitStatus(code=os.waitstatus_to_exitcode(status), signal=None)


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child, so it leaves no zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
