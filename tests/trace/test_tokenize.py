"""tokenize_requests: prompt forms, answers, order, streaming, and the process pool."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kvroute.errors import TokenizerError, UsageError
from kvroute.trace import tokenize as tokenize_module
from kvroute.trace.records import (
    BlockPrompt,
    ChatPrompt,
    Request,
    RequestAttrs,
    TextPrompt,
    TokenPrompt,
    as_token_ids,
)
from kvroute.trace.tokenize import auto_pool_workers, tokenize_requests
from kvroute.trace.tokenizer import ChatTokenizer, default_model_path, load_tokenizer


@pytest.fixture(scope="module")
def model() -> Path:
    path = default_model_path()
    assert path.is_file(), f"{path} missing: run scripts/install-engines model"
    return path


@pytest.fixture(scope="module")
def smol(model: Path) -> ChatTokenizer:
    return load_tokenizer(model)


def chat(i: int) -> Request:
    messages = [
        {"role": "system", "content": "You are a support bot for ACME."},
        {"role": "user", "content": f"Order #{i} is late 🙁, can you check?"},
    ]
    return Request(
        prompt=ChatPrompt(messages=messages),
        arrival_s=float(i),
        session_id=f"s{i % 7}",
        output_text=f"Order {i} ships tomorrow.",
        attrs=RequestAttrs(turn_index=0, num_messages=2),
        source_line=i + 1,
    )


def mixed_requests(n: int) -> Iterator[Request]:
    for i in range(n):
        kind = i % 4
        if kind == 0:
            yield chat(i)
        elif kind == 1:
            yield Request(prompt=TextPrompt(text=f"def f{i}(x):\n    return x * {i}"), output_len=9)
        elif kind == 2:
            yield Request(prompt=TokenPrompt(token_ids=as_token_ids([i, i + 1, i + 2])))
        else:
            hashes = np.array([i], dtype=np.uint64)
            yield Request(prompt=BlockPrompt(hashes, block_size_tokens=16, num_tokens=10))


def test_each_prompt_form(smol: ChatTokenizer, model: Path) -> None:
    requests = list(mixed_requests(4))
    out = list(tokenize_requests(requests, model, workers=1))
    assert len(out) == 4

    chat_out = out[0]
    assert isinstance(chat_out.prompt, TokenPrompt)
    assert isinstance(requests[0].prompt, ChatPrompt)
    expected = smol.encode_chat(requests[0].prompt.messages)
    assert chat_out.prompt.token_ids.tolist() == expected.tolist()
    assert chat_out.prompt.token_ids.dtype == np.uint32
    assert chat_out.prompt.token_ids.tolist()[:1] == [smol.token_to_id("<|im_start|>")]
    # Everything else about the request is kept.
    assert (chat_out.arrival_s, chat_out.session_id, chat_out.source_line) == (0.0, "s0", 1)
    assert chat_out.attrs == requests[0].attrs

    text_out = out[1]
    assert isinstance(text_out.prompt, TokenPrompt)
    assert isinstance(requests[1].prompt, TextPrompt)
    assert text_out.prompt.token_ids.tolist() == smol.encode(requests[1].prompt.text).tolist()

    assert out[2] is requests[2]  # token and block prompts pass through untouched
    assert out[3] is requests[3]


def test_answers_become_output_tokens(smol: ChatTokenizer, model: Path) -> None:
    with_len = Request(prompt=TextPrompt("q"), output_text="Yes<|im_end|>", output_len=99)
    without_len = Request(prompt=TextPrompt("q"), output_text="Order 12 ships tomorrow.")
    already = Request(
        prompt=TextPrompt("q"), output_text="ignored", output_token_ids=as_token_ids([7])
    )
    out = list(tokenize_requests([with_len, without_len, already], model, workers=1))

    ids = out[0].output_token_ids
    assert ids is not None
    assert smol.decode(ids) == "Yes<|im_end|>"
    assert smol.token_to_id("<|im_end|>") not in ids.tolist()  # text, as an engine counts it
    assert out[0].output_len == 99  # a known length is kept

    ids = out[1].output_token_ids
    assert ids is not None
    assert ids.tolist() == smol.encode("Order 12 ships tomorrow.").tolist()
    assert out[1].output_len == len(ids)

    assert out[2].output_token_ids is not None
    assert out[2].output_token_ids.tolist() == [7]
    assert out[2].output_len is None


def test_order_is_kept_across_batches(model: Path) -> None:
    requests = list(mixed_requests(23))
    out = list(tokenize_requests(requests, model, workers=1, batch_size=5))
    assert [r.arrival_s for r in out] == [r.arrival_s for r in requests]
    assert all(isinstance(r.prompt, TokenPrompt | BlockPrompt) for r in out)


def test_streams_without_reading_the_whole_trace(model: Path) -> None:
    consumed = 0

    def endless() -> Iterator[Request]:
        nonlocal consumed
        for i in itertools.count():
            consumed += 1
            yield chat(i)

    first = list(itertools.islice(tokenize_requests(endless(), model, workers=1, batch_size=8), 3))
    assert len(first) == 3
    assert consumed == 8


def test_token_only_traces_never_load_the_tokenizer(tmp_path: Path) -> None:
    requests = [r for r in mixed_requests(8) if isinstance(r.prompt, TokenPrompt | BlockPrompt)]
    for workers in (1, 2):
        out = list(tokenize_requests(requests, tmp_path / "absent.gguf", workers=workers))
        assert all(a is b for a, b in zip(out, requests, strict=True))


def test_bad_arguments(model: Path) -> None:
    with pytest.raises(UsageError, match="workers"):
        tokenize_requests([], model, workers=0)
    with pytest.raises(UsageError, match="batch_size"):
        tokenize_requests([], model, batch_size=0)


def test_missing_tokenizer_is_reported(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="not found"):
        list(tokenize_requests([chat(0)], tmp_path / "absent.gguf", workers=1))


def test_template_failure_names_the_line(model: Path) -> None:
    broken = Request(
        prompt=ChatPrompt(messages=[{"role": "user", "content": None}]), source_line=42
    )
    with pytest.raises(TokenizerError, match="request at line 42"):
        list(tokenize_requests([chat(0), broken], model, workers=1))


@pytest.mark.slow
def test_pool_matches_in_process_and_streams(model: Path) -> None:
    requests = list(mixed_requests(300))
    here = list(tokenize_requests(requests, model, workers=1, batch_size=16))

    consumed = 0

    def counted() -> Iterator[Request]:
        nonlocal consumed
        for request in requests:
            consumed += 1
            yield request

    stream = tokenize_requests(counted(), model, workers=2, batch_size=16)
    first = next(stream)
    # At most 2 batches per worker in flight, plus the one being submitted.
    assert consumed <= (2 * 2 + 1) * 16
    pooled = [first, *stream]

    assert len(pooled) == len(here)
    for a, b in zip(here, pooled, strict=True):
        assert a.arrival_s == b.arrival_s
        assert type(a.prompt) is type(b.prompt)
        if isinstance(a.prompt, TokenPrompt):
            assert isinstance(b.prompt, TokenPrompt)
            assert a.prompt.token_ids.tolist() == b.prompt.token_ids.tolist()
        if a.output_token_ids is not None:
            assert b.output_token_ids is not None
            assert a.output_token_ids.tolist() == b.output_token_ids.tolist()
            assert a.output_len == b.output_len


@pytest.mark.slow
def test_pool_reports_template_failures(model: Path) -> None:
    broken = Request(prompt=ChatPrompt(messages=[{"role": "user", "content": None}]), source_line=7)
    with pytest.raises(TokenizerError, match="request at line 7"):
        list(tokenize_requests([chat(0), broken], model, workers=2, batch_size=1))


def test_default_workers_rule() -> None:
    """One process below 4 cores (faster there, bench/RESULTS.md); a pool of one worker
    per core but one from 4 cores."""
    assert [auto_pool_workers(c) for c in (1, 2, 3, 4, 16)] == [0, 0, 0, 3, 15]


def test_default_on_few_cores_never_starts_a_pool(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(tokenize_module, "POOL_AFTER_REQUESTS", 4)

    def no_pool(source: Path, num_workers: int) -> None:
        raise AssertionError("a pool was started on 2 cores")

    monkeypatch.setattr(tokenize_module, "_start_pool", no_pool)
    requests = list(mixed_requests(40))
    out = list(tokenize_requests(requests, model, batch_size=4))
    assert [r.arrival_s for r in out] == [r.arrival_s for r in requests]


@pytest.mark.slow
def test_default_on_many_cores_pools_only_past_the_first_requests(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 8 cores a long trace goes to a pool of 7 after the first POOL_AFTER_REQUESTS,
    tokenized in this process; the result equals one process's, in order."""
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(tokenize_module, "POOL_AFTER_REQUESTS", 16)
    started: list[int] = []
    real_start = tokenize_module._start_pool
    consumed = 0

    def counted() -> Iterator[Request]:
        nonlocal consumed
        for request in requests:
            consumed += 1
            yield request

    def start(source: Path, num_workers: int):  # type: ignore[no-untyped-def]
        started.append(num_workers)
        assert consumed > 16  # the first 16 requests were tokenized here
        return real_start(source, 2)  # 2 real workers keep the test light

    monkeypatch.setattr(tokenize_module, "_start_pool", start)
    requests = list(mixed_requests(80))
    here = list(tokenize_requests(requests, model, workers=1, batch_size=8))
    auto = list(tokenize_requests(counted(), model, batch_size=8))
    assert started == [7]
    for a, b in zip(here, auto, strict=True):
        assert a.arrival_s == b.arrival_s
        if isinstance(a.prompt, TokenPrompt):
            assert isinstance(b.prompt, TokenPrompt)
            assert a.prompt.token_ids.tolist() == b.prompt.token_ids.tolist()
    assert len(auto) == len(here)
