"""The launch scripts advise writes: one instance, or every replica on its port of
gateway.yaml, started and stopped together (real llama-server), one replica alone,
and each replica on its own GPUs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from advise.evidence_fixtures import FakeEvidence, class_input, context, flat, hardware
from gateway.harness import free_port
from kvroute.advise.decide import decide_class
from kvroute.advise.flags import TraceLimits, llamacpp_flags
from kvroute.advise.gateway_config import replica_urls
from kvroute.advise.launch_scripts import launch_script
from kvroute.advise.result import EngineFlags, Flag
from kvroute.engines.paths import default_model_path, llama_server_path

LIMITS = TraceLimits(max_sequence_tokens=1000, prompt_p90_tokens=500)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_replica_urls_take_the_given_ones_then_ports_ten_apart() -> None:
    assert replica_urls("vllm", 1, []) == ["http://127.0.0.1:8082"]
    assert replica_urls("sglang", 3, []) == [
        "http://127.0.0.1:8083",
        "http://127.0.0.1:8093",
        "http://127.0.0.1:8103",
    ]
    assert replica_urls("vllm", 3, ["http://10.0.0.5:9000", "http://10.0.0.6:9000"]) == [
        "http://10.0.0.5:9000",
        "http://10.0.0.6:9000",
        "http://10.0.0.5:9020",
    ]


def test_one_replica_of_a_gpu_deployment_sees_its_own_gpus(tmp_path: Path) -> None:
    # No GPU here: a stand-in python records what the script hands the engine.
    record = tmp_path / "argv"
    stub = write(tmp_path / "python", f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES $*" > {record}\n')
    flags = EngineFlags("vllm", "0.0", [Flag("--tensor-parallel-size", "2", "2 GPUs")], 3, "why")
    urls = replica_urls("vllm", 3, [])
    script = write(
        tmp_path / "launch-vllm.sh", launch_script(flags, urls, cpu=False, gpus_per_replica=2)
    )
    env = {**os.environ, "MODEL": "m", "PYTHON": str(stub)}
    done = subprocess.run(
        [str(script), "2"], env=env, check=False, capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0, done.stderr
    gpus, *argv = record.read_text().split()
    assert gpus == "2,3"
    assert argv[argv.index("--port") + 1] == "8092"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    bad = subprocess.run(
        [str(script), "4"], env=env, check=False, capture_output=True, text=True, timeout=10
    )
    assert bad.returncode == 2 and "replica must be 1..3" in bad.stderr


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.engine
@pytest.mark.llamacpp
def test_two_llama_server_replicas_start_on_their_ports_and_stop_together(
    tmp_path: Path,
) -> None:
    binary = llama_server_path()  # not installed: fails with the install command
    ev = FakeEvidence({e: flat(0.5) for e in ("llamacpp", "vllm", "sglang")})
    d = decide_class(class_input(concurrency=2), context(ev, gpu="cpu"), {"vllm"})
    flags = EngineFlags("llamacpp", "b0", llamacpp_flags([d], hardware("cpu"), LIMITS), 2, "why")
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    script = write(tmp_path / "launch-llamacpp.sh", launch_script(flags, urls, cpu=True))
    env = {**os.environ, "MODEL": str(default_model_path()), "LLAMA_SERVER": str(binary)}
    proc = subprocess.Popen(
        [str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all(_healthy(p) for p in ports):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "replicas not healthy in 120 s"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_healthy(p) for p in ports) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not any(_healthy(p) for p in ports), "a replica outlived its script"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the script's group: replicas included
