"""Model settings from an engine's command line."""

from __future__ import annotations

from kvroute.cache.registry import EngineSettings
from kvroute.validate.settings import given_from_argv, with_given


def test_given_from_argv() -> None:
    argv = (
        "llama-server",
        "--parallel",
        "4",
        "--cache-ram",
        "0",
        "-sps",
        "0.5",
        "--cache-reuse=64",
    )
    assert given_from_argv("llamacpp", argv) == {
        "kv_unified": False,
        "cache_ram_mib": 0,
        "slot_prompt_similarity": 0.5,
        "cache_reuse": 64,
    }
    assert given_from_argv("llamacpp", ("-np", "2", "-kvu"))["kv_unified"] is True
    assert given_from_argv("vllm", ("--max-num-seqs", "4", "--block-size", "32")) == {
        "max_num_seqs": 4
    }
    s = with_given(EngineSettings(), "llamacpp", {"cache_ram_mib": 0})
    assert s.llamacpp.cache_ram_mib == 0 and s.vllm == EngineSettings().vllm
