"""A hand-made run predicted and compared (pure)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from kvroute.cache.registry import EngineSettings
from kvroute.cli.simulate.output import json_bytes
from kvroute.validate.compare import compare
from kvroute.validate.predict import predict
from kvroute.validate.result import EngineSetup, ResetOutcome, RunInfo, RunShape, Served
from kvroute.validate.settings import with_given


def test_predict_and_compare_on_a_hand_made_run() -> None:
    """Two identical prompts one after the other on vLLM with 4-token blocks: the second
    hits ⌊(L-1)/4⌋·4 tokens; a measured value off by one block is a 40 pp miss on it."""
    ids = [np.arange(10, dtype=np.uint32), np.arange(10, dtype=np.uint32)]
    served = [
        Served(0.0, 1.0, 0.0, None, 10, 0, 2, None, None),
        Served(1.1, 2.0, 1.1, None, 10, 4, 2, None, None),
    ]
    settings = with_given(EngineSettings(), "vllm", {"block_size_tokens": 4})
    setup = EngineSetup("vllm", settings, 4 * 100, {"block_size": 4, "num_blocks": 100}, {})
    pred = predict(ids, served, setup, lead_s=0.02)
    assert pred.outcome.cached_tokens.tolist() == [0, 8] and pred.passes == 1
    r = compare(
        ids,
        served,
        pred,
        setup=setup,
        counters=None,
        endpoints=["completions"] * 2,
        run=RunInfo("vllm", "u", "m", ResetOutcome.RESET, RunShape.CLOSED_LOOP, 1),
    )
    assert r.hit_ratio_error_pp == pytest.approx(100 * (8 - 4) / 20)
    assert r.request_mae_pp == pytest.approx(100 * 0.4 / 2)
    assert r.comparison.exact_share == 0.5 and r.num_prompt_mismatches == 0


def test_the_result_writes_as_json_with_its_engine_settings() -> None:
    """The JSON writer takes the engine settings of the compiled build too (orjson's own
    dataclass path crashed the interpreter on their unboxed bool and float fields)."""
    ids = [np.arange(10, dtype=np.uint32)]
    served = [Served(0.0, 1.0, 0.0, None, 10, 0, 2, None, None)]
    setup = EngineSetup("llamacpp", EngineSettings(), 4096, {}, {})
    pred = predict(ids, served, setup, lead_s=0.02)
    r = compare(
        ids,
        served,
        pred,
        setup=setup,
        counters=None,
        endpoints=["completions"],
        run=RunInfo("llamacpp", "u", "m", ResetOutcome.RESET, RunShape.CLOSED_LOOP, 1),
    )
    doc = orjson.loads(json_bytes(r))
    llamacpp = doc["setup"]["settings"]["llamacpp"]
    assert llamacpp["slot_prompt_similarity"] == 0.1 and llamacpp["kv_unified"] is True
    assert doc["setup"]["engine"] == "llamacpp"
