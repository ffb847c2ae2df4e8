"""Process identity and group stop, on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kvroute.engines.process import (
    Lifetime,
    ProcessId,
    StopOutcome,
    collect_exit,
    group_members,
    identify,
    is_running,
    spawn,
    stop_group,
)
from kvroute.errors import EngineError


def _wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_spawn_identify_and_stop(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    proc = spawn(
        ["sh", "-c", "echo hello; exec sleep 60"],
        env=dict(os.environ),
        log_path=log,
        lifetime=Lifetime.DETACHED,
    )
    assert is_running(proc)
    assert identify(proc.pid) == proc
    # Its own session and process group: a Ctrl-C to ours does not reach it.
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    assert _wait_until(lambda: "hello" in log.read_text())
    assert stop_group(proc, timeout_s=5) is StopOutcome.STOPPED
    assert not is_running(proc)
    assert identify(proc.pid) is None
    assert stop_group(proc) is StopOutcome.ALREADY_GONE


def test_stop_reaches_the_whole_group(tmp_path: Path) -> None:
    # The leader starts two grandchildren, as vLLM's server starts its engine core.
    proc = spawn(
        ["sh", "-c", "sleep 60 & sleep 60 & wait"],
        env=dict(os.environ),
        log_path=tmp_path / "log",
        lifetime=Lifetime.DETACHED,
    )
    assert _wait_until(lambda: len(group_members(proc.pid)) == 3)
    members = group_members(proc.pid)
    assert stop_group(proc, timeout_s=5) is StopOutcome.STOPPED
    assert group_members(proc.pid) == []
    assert all(identify(pid) is None for pid in members)


def test_term_ignoring_process_is_killed(tmp_path: Path) -> None:
    proc = spawn(
        ["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"],
        env=dict(os.environ),
        log_path=tmp_path / "log",
        lifetime=Lifetime.DETACHED,
    )
    started = time.monotonic()
    assert stop_group(proc, timeout_s=0.5) is StopOutcome.STOPPED
    assert time.monotonic() - started < 10
    assert not is_running(proc)


def test_recycled_pid_is_not_ours_and_is_left_alone(tmp_path: Path) -> None:
    proc = spawn(
        ["sleep", "60"], env=dict(os.environ), log_path=tmp_path / "log", lifetime=Lifetime.DETACHED
    )
    impostor = ProcessId(pid=proc.pid, start_ticks=proc.start_ticks - 1)
    assert not is_running(impostor)
    assert stop_group(impostor) is StopOutcome.NOT_OURS
    assert is_running(proc)
    assert stop_group(proc, timeout_s=5) is StopOutcome.STOPPED


def test_orphaned_group_members_are_stopped(tmp_path: Path) -> None:
    # The leader exits, its child lives on in the group: down must still stop it.
    proc = spawn(
        [
            "sh",
            "-c",
            "sleep 60 & sleep 0.5; exit 0",
        ],  # the leader outlives spawn() checks, then exits
        env=dict(os.environ),
        log_path=tmp_path / "log",
        lifetime=Lifetime.DETACHED,
    )
    assert _wait_until(lambda: identify(proc.pid) is None and len(group_members(proc.pid)) == 1)
    [orphan] = group_members(proc.pid)
    assert stop_group(proc, timeout_s=5) is StopOutcome.STOPPED
    assert identify(orphan) is None


def test_tied_engine_dies_with_a_killed_parent(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent_code = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from kvroute.engines.process import Lifetime, spawn
        proc = spawn(["sleep", "60"], env=dict(os.environ), log_path=Path({str(tmp_path / "log")!r}),
                     lifetime=Lifetime.TIED_TO_PARENT)
        Path({str(pid_file)!r}).write_text(f"{{proc.pid}} {{proc.start_ticks}}")
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        assert _wait_until(pid_file.exists, timeout_s=20)
        pid, ticks = (int(x) for x in pid_file.read_text().split())
        child = ProcessId(pid, ticks)
        assert _wait_until(lambda: is_running(child))
        parent.send_signal(signal.SIGKILL)  # a crash: no cleanup code runs
        parent.wait()
        assert _wait_until(lambda: not is_running(child)), "tied engine outlived its parent"
    finally:
        parent.kill()
        parent.wait()


def test_unstartable_program_is_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="could not start"):
        spawn(
            [str(tmp_path / "missing")],
            env={},
            log_path=tmp_path / "log",
            lifetime=Lifetime.DETACHED,
        )


@pytest.mark.parametrize(
    ("script", "described"),
    [("kill -SEGV $$", "killed by SIGSEGV"), ("exit 3", "exited with status 3")],
)
def test_collect_exit_says_how_a_child_ended(tmp_path: Path, script: str, described: str) -> None:
    proc = spawn(
        ["sh", "-c", f"echo starting; sleep 0.3; {script}"],
        env=dict(os.environ),
        log_path=tmp_path / "log.txt",
        lifetime=Lifetime.DETACHED,
    )
    assert _wait_until(lambda: identify(proc.pid) is None)
    ended = collect_exit(proc)
    assert ended is not None and ended.describe() == described
    assert collect_exit(proc) is None  # reaped once: the status is not invented twice


def test_collect_exit_is_none_while_running(tmp_path: Path) -> None:
    proc = spawn(
        ["sleep", "30"], env=dict(os.environ), log_path=tmp_path / "l", lifetime=Lifetime.DETACHED
    )
    try:
        assert collect_exit(proc) is None
        assert is_running(proc)
    finally:
        stop_group(proc)
