#!/usr/bin/env python3
"""Smoke-test an installed engine: start it, ask one question, stop it.

    smoke_engine.py --name llama-server --log FILE [--env K=V ...] [--timeout-s S] -- ARGV...

ARGV is the server's command line; every ``{port}`` in it is replaced by a free port on
127.0.0.1. The test passes when the server becomes ready (``GET /health`` answers 200)
and answers one chat completion at temperature 0 with some text. It fails, with one
error line naming the cause (the signal, for a crash), the last lines of the server's
log and the log's path, when the server dies, never becomes ready, or answers badly.
Exit status: 0 passed, 1 failed, 2 bad arguments.

Standard library only: the install scripts run it before kvroute's own environment
exists. The server runs as the leader of its own process group, so stopping it stops
every process it spawned (vLLM's engine core).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

QUESTION = "What is the capital of France?"
LOG_TAIL_LINES = 15


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def signal_name(returncode: int) -> str:
    """``-11`` -> ``SIGSEGV``; Popen reports a death by signal as minus its number."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def exit_description(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal_name(returncode)}"
    return f"exited with status {returncode}"


def log_tail(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in lines[-LOG_TAIL_LINES:]) or "(empty log)"


def get_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def ask(base_url: str, timeout_s: float) -> str:
    """One greedy chat completion; returns the answer's text (raises on a bad answer)."""
    body = {
        "model": "smoke",
        "messages": [{"role": "user", "content": QUESTION}],
        "temperature": 0,
        "max_tokens": 12,
    }
    request = urllib.request.Request(
        base_url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer = json.load(response)
    text = answer["choices"][0]["message"]["content"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty answer: {answer!r}")
    return text


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run(name: str, argv: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> str:
    """Start, wait for ready, ask, stop. Returns the answer; raises RuntimeError on failure."""
    port = free_port()
    command = [arg.replace("{port}", str(port)) for arg in argv]
    base_url = f"http://127.0.0.1:{port}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        try:
            proc = subprocess.Popen(
                command,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeError(f"{name} could not be started: {exc}") from exc
    try:
        deadline = time.monotonic() + timeout_s
        while get_status(base_url + "/health") != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} {exit_description(proc.returncode)} while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} was not ready within {timeout_s:.0f} s")
            time.sleep(0.5)
        try:
            return ask(base_url, timeout_s=max(30.0, deadline - time.monotonic()))
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            time.sleep(0.5)  # a crash mid-answer: let the exit status arrive
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} {exit_description(proc.returncode)} while answering"
                ) from exc
            raise RuntimeError(f"{name} answered the test question badly: {exc}") from exc
    finally:
        stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="engine name for messages")
    parser.add_argument("--log", required=True, type=Path, help="where the server's output goes")
    parser.add_argument("--env", action="append", default=[], metavar="K=V")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("argv", nargs="+", help="server command line (after --)")
    args = parser.parse_args()
    env: dict[str, str] = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env wants K=V, got {item!r}")
        env[key] = value
    started = time.monotonic()
    try:
        answer = run(args.name, args.argv, env, args.log, args.timeout_s)
    except RuntimeError as exc:
        print(f"[smoke] error: {exc}; last lines of {args.log}:", file=sys.stderr)
        print(log_tail(args.log), file=sys.stderr)
        return 1
    print(
        f"[smoke] {args.name} answers ({time.monotonic() - started:.1f} s): {answer.strip()!r}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
