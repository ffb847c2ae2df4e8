"""The compiled build of the replay (``scripts/build-native``) gives the Python sources' results.

Each side runs in its own interpreter (``KVROUTE_NATIVE=0`` forces the sources): the same
traces through every model, tight and roomy pools, default and non-default engine
settings, every per-request figure and counter compared exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvroute.cache import native

HERE = Path(__file__).resolve().parent

OUTCOMES = r"""
import hashlib, json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from cache_traces import block_trace, token_trace
from kvroute.cache import native
from kvroute.cache.base import CacheGeometry
from kvroute.cache.llamacpp import LlamaCppConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay import replay
from kvroute.cache.sglang import SchedulePolicy, SglangConfig
from kvroute.cache.timing import TimingOptions, plan
from kvroute.cache.vllm import VllmConfig

variants = {
    "default": EngineSettings(),
    "other": EngineSettings(
        vllm=VllmConfig(block_size_tokens=4, max_num_seqs=3),
        sglang=SglangConfig(page_size=4, schedule_policy=SchedulePolicy.LPM),
        llamacpp=LlamaCppConfig(num_slots=3, cache_reuse=4, cache_ram_mib=1),
    ),
}
traces = {
    "tokens": (token_trace(300, seed=3, outputs_known=True), None, [150, 600, None]),
    "blocks": (block_trace(300, seed=4), 8, [120, 480, None]),
}
out = {"compiled": native.active()}
for tname, (reqs, block, caps) in traces.items():
    timing = TimingOptions()
    schedule = plan(reqs, timing)
    for cap in caps:
        for vname, settings in variants.items():
            for engine in ("llamacpp", "vllm", "sglang"):
                model = cache_models(settings).get(engine)(CacheGeometry(cap, block, 64))
                o = replay(reqs, model, schedule, timing)
                model.check_invariants()
                out[f"{tname}@{cap}/{vname}/{engine}"] = {
                    "cached": o.cached_tokens.tolist(),
                    "admitted": o.admitted.tolist(),
                    "wait": np.nan_to_num(o.wait_s, nan=-1.0).tolist(),
                    "counters": repr((o.stats, o.final_usage, o.peak_pinned_tokens, o.peak_running)),
                }
print(json.dumps(out))
"""


def outcomes(compiled: bool) -> dict[str, object]:
    env = {**os.environ, "KVROUTE_NATIVE": "1" if compiled else "0"}
    done = subprocess.run(
        [sys.executable, "-c", OUTCOMES, str(HERE)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(not native.status()[0], reason=f"compiled build: {native.status()[1]}")
def test_compiled_and_python_builds_replay_identically() -> None:
    compiled, python = outcomes(True), outcomes(False)
    assert compiled.pop("compiled") is True
    assert python.pop("compiled") is False
    assert compiled.keys() == python.keys()
    for key in compiled:
        assert compiled[key] == python[key], f"{key}: the compiled build differs"
    # The configurations exercise the models: hits, waits and rejections all occur.
    assert any(sum(v["cached"]) for v in python.values())  # type: ignore[index]
    assert any(max(v["wait"]) > 0 for v in python.values())  # type: ignore[index]


def test_a_stale_build_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KVROUTE_NATIVE", raising=False)
    monkeypatch.setattr(native, "NATIVE_DIR", tmp_path)
    (tmp_path / native.STAMP).write_text(json.dumps({"digest": "built from older sources"}))
    assert native.status() == (
        False,
        "stale: the sources changed since the build (run scripts/build-native)",
    )
    assert native.search_path(["src"]) == ["src"]
    (tmp_path / native.STAMP).write_text(json.dumps({"digest": native.source_digest()}))
    assert native.status()[0]
    assert native.search_path(["src"]) == [str(tmp_path), "src"]


def test_kvroute_native_0_forces_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVROUTE_NATIVE", "0")
    assert native.status() == (False, "disabled by KVROUTE_NATIVE=0")
    assert native.search_path(["src"]) == ["src"]
