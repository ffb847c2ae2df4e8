"""Piece-wise, memoised prompt encoding gives exactly the tokenizer's own ids."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer

TEXTS = [
    "",
    "plain text, no specials",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces<|im_end|>trailing  <|im_start|>  ",
    "<|im_start|><|im_end|><|endoftext|>",
    "unicode: naïve café — 日本語 🙂<|im_end|>\n\n\n  x",
    "<|im_start|system>not quite special<|im_end",
]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return load_tokenizer()


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_the_tokenizer(tokenizer: ChatTokenizer, text: str) -> None:
    prompts = PromptTokens(tokenizer)
    for _ in range(2):  # cold, then from the memo
        assert np.array_equal(prompts.encode(text), tokenizer.encode(text))


def test_conversation_turns_reuse_earlier_pieces(tokenizer: ChatTokenizer) -> None:
    prompts = PromptTokens(tokenizer)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief. " * 200}]
    for turn in range(4):
        messages.append({"role": "user", "content": f"Question {turn}?"})
        ids = prompts.token_ids({"messages": messages})
        assert ids is not None and np.array_equal(ids, tokenizer.encode_chat(messages))
        ids[0] = ids[0]  # writable: a caller may change its copy
        # Packed (capture's form): the same ids as native uint32 bytes.
        assert prompts.packed_ids({"messages": messages}) == ids.astype(np.uint32).tobytes()
        messages.append({"role": "assistant", "content": f"Answer {turn}."})
    assert prompts.num_piece_hits > prompts.num_piece_misses


def test_packed_ids_of_every_kind_of_body(tokenizer: ChatTokenizer) -> None:
    """Chat bodies the piece memo takes, ones it does not (a tool message, a template
    it cannot split), completions as text or ids: packed equals the array's bytes."""
    prompts = PromptTokens(tokenizer)
    bodies: list[dict[str, Any]] = [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}]},
        {"prompt": "a completion prompt"},
        {"prompt": [5, 6, 7]},
        {"prompt": [True]},
    ]
    for body in bodies:
        ids = prompts.token_ids(body)
        packed = prompts.packed_ids(body)
        if ids is None:
            assert packed is None
        else:
            assert isinstance(packed, bytes) and packed == ids.astype(np.uint32).tobytes()


def test_bodies_that_cannot_be_tokenized_give_none(tokenizer: ChatTokenizer) -> None:
    prompts = PromptTokens(tokenizer)
    assert prompts.token_ids({"prompt": ["a", "b"]}) is None  # a batch
    assert prompts.token_ids({"prompt": [True]}) is None
    ids = prompts.token_ids({"prompt": [5, 6]})
    assert ids is not None and ids.tolist() == [5, 6]
    assert prompts.token_ids({"prompt": ["one"]}) is not None  # a batch of one
