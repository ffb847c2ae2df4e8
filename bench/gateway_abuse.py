"""`kvroute serve` under attack from one local client: does a second client still get
answers? (issue 22's target: its `/health` p99 under 50 ms.)

One gateway process (`kvroute serve`, uvloop, default listener limits). Phases, each
``--seconds`` long, in one run:

- ``baseline``: nothing else.
- ``slow``: ``--slow`` connections (10,000) opened as fast as the attacker can, each
  sending a partial head and then a byte a second, reopened whenever the gateway
  closes one (its connection cap and head timeout do).
- ``head``: ``--head-mib`` (100) MiB of request line without end, over and over on
  fresh connections (each is cut with a 414 at 64 KiB).
- ``pipeline``: 8 connections pipelining 4 KiB POSTs and GET /health as fast as the
  socket takes them, never reading an answer.

Meanwhile a prober opens a fresh connection every 10 ms for ``GET /health`` (as a load
balancer would) and records the time to the full answer; refused or failed probes are
counted. The gateway's RSS (/proc) is read before and at the end of each phase.

Run: ``.venv/bin/python bench/gateway_abuse.py``; writes
``bench/gateway_abuse_results.json``. Before/after, side by side in one run:
``--python /work/main/.venv/bin/python .venv/bin/python --repeat 2`` (each phase runs
on each tree's gateway in turn, the order reversed every other round; the gateway's
CPU share and the load average are recorded per phase). ``--phases`` picks phases.
Loopback only; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kvroute.stats import describe

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (granian serves from a worker process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(k) for k in (task / "children").read_text().split()]
    return out


def _rss_mib(pid: int) -> float:
    total = 0.0
    for p in _tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(x.split()[1]) / 1024 for x in lines if x.startswith("VmRSS:"))
    return total


def _probe(port: int, stop: threading.Event, out: list[float], failures: list[str]) -> None:
    request = f"GET /health HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode()
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            with socket.create_connection((HOST, port), timeout=2) as s:
                s.sendall(request)
                got = b""
                while True:
                    piece = s.recv(4096)
                    if not piece:
                        break
                    got += piece
            if not got.startswith(b"HTTP/1.1 200"):
                failures.append(got[:40].decode("latin-1"))
            else:
                out.append(time.perf_counter() - t0)
        except OSError as exc:
            failures.append(type(exc).__name__)
        time.sleep(0.01)


async def _slow(port: int, num: int, seconds: float) -> dict[str, int]:
    end = time.monotonic() + seconds
    counts = {"opened": 0, "closed_by_gateway": 0, "open_failed": 0}

    async def one() -> None:
        while time.monotonic() < end:
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                counts["open_failed"] += 1
                await asyncio.sleep(0.5)
                continue
            counts["opened"] += 1
            try:
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
                while time.monotonic() < end and not writer.is_closing():
                    try:
                        if not await asyncio.wait_for(reader.read(4096), 1.0):
                            break  # closed by the gateway (a 408, or evicted)
                    except TimeoutError:
                        writer.write(b"X")
            except OSError:
                pass
            counts["closed_by_gateway"] += time.monotonic() < end
            writer.close()

    await asyncio.gather(*(one() for _ in range(num)), return_exceptions=True)
    return counts


async def _head(port: int, total_mib: int, seconds: float) -> dict[str, int]:
    end = time.monotonic() + seconds
    sent, connections = 0, 0
    piece = b"a" * 65536
    while sent < total_mib * 1024 * 1024 and time.monotonic() < end:
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        connections += 1
        try:
            writer.write(b"GET /")
            while time.monotonic() < end and not writer.is_closing():
                if reader._buffer or reader.at_eof():
                    break
                writer.write(piece)
                sent += len(piece)
                await asyncio.wait_for(writer.drain(), 1.0)
        except (OSError, TimeoutError):
            pass
        writer.close()
    return {"sent_mib": sent // (1024 * 1024), "connections": connections}


async def _pipeline(port: int, seconds: float) -> dict[str, int]:
    end = time.monotonic() + seconds
    body = b"x" * 4096
    batch = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
        + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    ) * 16
    sent = 0

    async def one() -> None:
        nonlocal sent
        while time.monotonic() < end:
            try:
                _, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                while time.monotonic() < end and not writer.is_closing():
                    writer.write(batch)
                    sent += len(batch)
                    await asyncio.wait_for(writer.drain(), max(0.01, end - time.monotonic()))
            except (OSError, TimeoutError):
                pass
            writer.close()

    await asyncio.gather(*(one() for _ in range(8)), return_exceptions=True)
    return {"sent_mib": sent // (1024 * 1024)}


def _attack(kind: str, port: int, args: dict[str, Any], out: Any) -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    seconds = args["seconds"]
    if kind == "slow":
        result = asyncio.run(_slow(port, args["slow"], seconds))
    elif kind == "head":
        result = asyncio.run(_head(port, args["head_mib"], seconds))
    else:
        result = asyncio.run(_pipeline(port, seconds))
    out.put(result)


def _start_gateway(python: str, tmp: Path, label: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    """``kvroute serve`` run by ``python`` (its tree's code), ready to take connections."""
    port = _free_port()
    config = tmp / f"{label}.yaml"
    config.write_text(
        f"listener: {{host: {HOST}, port: {port}, access_log: false}}\n"
        f"backends: [{{name: none, url: 'http://{HOST}:{_free_port()}', engine: vllm}}]\n"
        "health: {interval_s: 60}\n"
    )
    argv = [python, "-c", "from kvroute.cli.serve import serve_cmd; serve_cmd()"]
    log = tmp / f"{label}.stderr.txt"
    with log.open("w") as err:
        gateway = subprocess.Popen([*argv, "--config", str(config)], stderr=err)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return gateway, port, log
        except OSError:
            assert time.monotonic() < deadline and gateway.poll() is None, log.read_text()
            time.sleep(0.1)


def _phase(kind: str, pid: int, port: int, args: argparse.Namespace) -> dict[str, Any]:
    rss_before = _rss_mib(pid)
    stop, latencies, failures = threading.Event(), [], []
    prober = threading.Thread(target=_probe, args=(port, stop, latencies, failures))
    queue: Any = mp.get_context("spawn").Queue()
    attacker = None
    if kind != "baseline":
        attacker = mp.get_context("spawn").Process(
            target=_attack, args=(kind, port, vars(args), queue)
        )
        attacker.start()
        time.sleep(1.0)  # the attack under way before probing
    prober.start()
    cpu_before = _cpu_s(pid)
    time.sleep(args.seconds - (1.0 if attacker else 0.0))
    cpu_used = _cpu_s(pid) - cpu_before
    rss_end = _rss_mib(pid)
    stop.set()
    prober.join(5)
    attack = None
    if attacker is not None:
        attacker.join(args.seconds + 20)
        attack = queue.get(timeout=5) if not queue.empty() else None
        if attacker.is_alive():
            attacker.kill()
    time.sleep(2.5)  # slow connections time out, lingering ones close
    d = describe([x * 1000 for x in latencies])
    return {
        "health_probes": d.count,
        "health_failures": len(failures),
        "failure_kinds": sorted(set(failures))[:5],
        "health_ms": {"p50": d.p50, "p99": d.p99, "max": d.max},
        "gateway_cpu_share": cpu_used / (args.seconds - (1.0 if attacker else 0.0)),
        "rss_mib": {"before": rss_before, "end": rss_end, "after": _rss_mib(pid)},
        "attack": attack,
        "load_average": os.getloadavg()[0],
    }


def _cpu_s(pid: int) -> float:
    total = 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


GRANIAN_APP = """
import json
OK = json.dumps({"status": "ok"}).encode()
BAD = json.dumps({"error": {"message": "the request body is not valid JSON",
                            "type": "invalid_request_error", "param": None, "code": None}}).encode()
async def app(scope, proto):
    await proto()
    if scope.path == "/health":
        proto.response_bytes(200, [("content-type", "application/json")], OK)
    else:
        proto.response_bytes(400, [("content-type", "application/json")], BAD)
"""


def _start_granian(granian: str, tmp: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """A bare granian RSGI app answering like the gateway's cheap paths (``/health``
    200, anything else a 400 error JSON), at the settings a deployment would pick:
    one worker, its header read timeout at the gateway's ``head_timeout_s``."""
    port = _free_port()
    (tmp / "gr_abuse_app.py").write_text(GRANIAN_APP)
    argv = [
        granian, "--interface", "rsgi", "--host", HOST, "--port", str(port),
        "--workers", "1", "--runtime-threads", "1", "--loop", "uvloop", "--http", "1",
        "--http1-header-read-timeout", "10000", "--log-level", "warning", "--no-ws",
        "gr_abuse_app:app",
    ]  # fmt: skip
    log = tmp / "granian.stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(argv, cwd=tmp, stderr=err, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return proc, port, log
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)


PHASES = ("baseline", "slow", "head", "pipeline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--slow", type=int, default=10_000)
    parser.add_argument("--head-mib", type=int, default=100)
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument(
        "--python",
        nargs="+",
        default=[sys.executable],
        help="interpreters whose kvroute is served, side by side in one run (another "
        "tree's .venv/bin/python: before vs after); each phase runs on each in turn",
    )
    parser.add_argument(
        "--granian",
        help="a granian executable (a throwaway venv's): its bare RSGI app is attacked "
        "too, beside the gateways (the server decision's abuse columns)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every phase")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).with_name("gateway_abuse_results.json")
    )
    args = parser.parse_args()
    labels = [str(Path(p).absolute().parents[2]) for p in args.python]  # the trees
    with tempfile.TemporaryDirectory() as tmp:
        gateways = []
        if args.granian:  # first: a granian that cannot start leaves no gateway behind
            gateways.append(_start_granian(args.granian, Path(tmp)))
        gateways += [
            _start_gateway(python, Path(tmp), f"gw{i}") for i, python in enumerate(args.python)
        ]
        if args.granian:
            labels.insert(0, "granian (bare RSGI)")
        runs: list[dict[str, Any]] = []
        try:
            for round_ in range(args.repeat):
                for kind in args.phases:
                    order = list(range(len(gateways)))
                    if round_ % 2:
                        order.reverse()  # neither tree always goes first
                    for i in order:
                        gateway, port, _ = gateways[i]
                        result = _phase(kind, gateway.pid, port, args)
                        runs.append({"tree": labels[i], "phase": kind, "round": round_, **result})
                        print(labels[i], kind, json.dumps(result), flush=True)
        finally:
            for gateway, _, _ in gateways:
                gateway.terminate()
                gateway.wait(30)
        warnings = [
            line
            for _, _, log in gateways
            for line in log.read_text().splitlines()
            if "connection cap" in line
        ]
    result = {"seconds_per_phase": args.seconds, "runs": runs, "cap_warnings": warnings[:3]}
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
