"""Ctrl-C during a benchmark on a real llama-server: what completed is written (finished
steps whole, the cut step's ended requests), the cut run is marked, and the command
exits 130. Covers one process and forked shards, a Ctrl-C from the terminal (the whole
process group) and one sent to the parent alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from kvroute.bench.results.record import ErrorKind, Outcome
from kvroute.bench.results.result import BenchResult, Run, load_result
from kvroute.bench.run_options import BenchEndpoint, RunOptions
from kvroute.bench.runner import BenchInterrupted, run_bench, workload_info
from kvroute.bench.schedule import ClosedLoop
from kvroute.bench.scrape import CacheMode
from kvroute.bench.workloads.registry import generate
from kvroute.engines.state import EngineRecord
from kvroute.trace.tokenizer import load_tokenizer

NUM_REQUESTS = 8
OUTPUT_TOKENS = 16
PARAMS = {"question_tokens": "32", "output_tokens": str(OUTPUT_TOKENS)}

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp, pytest.mark.slow]


def predicted_tokens(base_url: str) -> float:
    """llama-server's count of generated tokens, updated as each request ends."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("llamacpp:tokens_predicted_total")
    )


def cut_after_first_end(base_url: str, send_sigint: Callable[[], None]) -> threading.Thread:
    """Ctrl-C once the server has ended one more request (the second step is under
    way: one request of it is complete, the next is on the wire, most are not sent)."""

    def watch() -> None:
        before = predicted_tokens(base_url)
        deadline = time.monotonic() + 120
        while predicted_tokens(base_url) < before + OUTPUT_TOKENS:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        time.sleep(0.2)  # the client reads the last event
        send_sigint()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def check_cut(result: BenchResult) -> Run:
    """The first step whole, the second cut short and marked; returns the cut run."""
    assert result.interrupted
    first, cut = result.runs
    assert not first.interrupted and first.load.label == "concurrency=1"
    assert first.summary.num_ok == NUM_REQUESTS, first.summary.errors
    assert cut.interrupted and cut.load.label == "concurrency=2"
    outcomes = [(r.outcome, r.error_kind) for r in cut.requests]
    num_ok = outcomes.count((Outcome.OK, None))
    num_cut = outcomes.count((Outcome.ERROR, ErrorKind.INTERRUPTED))
    num_not_sent = outcomes.count((Outcome.NOT_SENT, None))
    assert num_ok + num_cut + num_not_sent == NUM_REQUESTS == len(cut.requests), outcomes
    assert num_ok >= 1 and num_cut >= 1 and num_not_sent >= 1, outcomes
    assert cut.summary.errors == {"interrupted": num_cut}
    # Completed requests keep their full measurements.
    assert all(
        r.end_s is not None and r.completion_tokens for r in cut.requests if r.outcome is Outcome.OK
    )
    return cut


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_in_a_sweep_writes_what_completed_and_exits_130(
    llamacpp_server: EngineRecord, tmp_path: Path, workers: int
) -> None:
    out = tmp_path / "cut.json"
    args = [
        sys.executable,
        "-c",
        "from kvroute.cli.main import main; main()",
        "bench",
        "-e",
        f"llama={llamacpp_server.base_url}",
        "-w",
        "qa",
        *(x for k, v in PARAMS.items() for x in ("-p", f"{k}={v}")),
        "-n",
        str(NUM_REQUESTS),
        "--concurrency",
        "1,2",
        "--workers",
        str(workers),
        "--ignore-eos",
        "--no-overlap-check",
        "--json",
        str(out),
    ]
    proc = subprocess.Popen(
        args,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a command
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "concurrency=2" in line:
            break
    else:
        pytest.fail("".join(lines))
    # what Ctrl-C in a terminal does: SIGINT to the whole process group
    cut_after_first_end(llamacpp_server.base_url, lambda: os.killpg(proc.pid, signal.SIGINT))
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, "".join(lines) + rest
    assert "interrupted" in rest and "Traceback" not in rest
    check_cut(load_result(out))


def test_ctrl_c_to_the_parent_alone_stops_forked_shards(llamacpp_server: EngineRecord) -> None:
    tok = load_tokenizer()
    requests = generate("qa", NUM_REQUESTS, tok, seed=3, params=PARAMS)
    options = RunOptions(
        loads=(ClosedLoop(1), ClosedLoop(2)),
        cache=CacheMode.COLD,
        ignore_eos=True,
        workers=2,
        max_duration_s=120,
    )

    watchers = []

    def progress(line: str) -> None:
        if "concurrency=2" in line:  # SIGINT to this process only, not its shards
            pid = os.getpid()
            watchers.append(
                cut_after_first_end(llamacpp_server.base_url, lambda: os.kill(pid, signal.SIGINT))
            )

    with pytest.raises(BenchInterrupted) as stop:
        run_bench(
            requests,
            workload_info("qa", PARAMS, 3, tok.name, requests),
            [BenchEndpoint("llama", llamacpp_server.base_url)],
            options,
            progress=progress,
        )
    check_cut(stop.value.result)
