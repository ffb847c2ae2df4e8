"""The compiled build of the replay (``scripts/build-native``) gives the Python sources' results.

Each side runs in its own interpreter (``KVROUTE_NATIVE=0`` forces the sources): the same
traces through every model, tight and roomy pools, default and non-default engine
settings, every per-request figure and counter compared exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvroute import _accel
from native_builds import assert_same, outcomes

TESTS = Path(__file__).resolve().parents[1]
"""``tests/``: the scripts import ``cache.cache_traces`` from it."""

OUTCOMES = r"""
import hashlib, json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from kvroute import _accel
_accel.enable()
from cache.cache_traces import block_trace, token_trace
from kvroute.cache.base import CacheGeometry
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.registry import EngineSettings, cache_models
from kvroute.cache.replay.loop import replay
from kvroute.cache.models.sglang import SchedulePolicy, SglangConfig
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.cache.models.vllm import VllmConfig

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
out = {"compiled": _accel.active("cache")}
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


@pytest.mark.skipif(
    not _accel.CACHE.status()[0], reason=f"compiled build: {_accel.CACHE.status()[1]}"
)
def test_compiled_and_python_builds_replay_identically() -> None:
    python = outcomes(OUTCOMES, str(TESTS), compiled=False)
    assert_same(outcomes(OUTCOMES, str(TESTS), compiled=True), python)
    # The configurations exercise the models: hits, waits and rejections all occur.
    assert any(sum(v["cached"]) for v in python.values())  # type: ignore[index]
    assert any(max(v["wait"]) > 0 for v in python.values())  # type: ignore[index]
