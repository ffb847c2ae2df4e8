"""Loose model-name matching: one model's many spellings match, other models do not."""

from __future__ import annotations

import pytest

from kvroute.trace.model_names import mismatched_models, name_parts, names_match

SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.parametrize(
    "model",
    [
        "smollm2-135m-instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2-135m-instruct-q8_0",
        "smollm2:135m",
    ],
)
def test_spellings_of_the_tokenizers_model_match(model: str) -> None:
    assert names_match(SMOL_GGUF, model)
    assert names_match("SmolLM2-135M-Instruct-hf", model)  # the HF conversion's directory


@pytest.mark.parametrize("model", ["gpt-4o", "m", "Qwen/Qwen2.5-7B-Instruct", "", "smollm3-3b"])
def test_other_models_do_not_match(model: str) -> None:
    assert not names_match(SMOL_GGUF, model)


def test_a_shorter_name_matches_within_a_longer_one() -> None:
    assert names_match("Meta-Llama-3.1-8B-Instruct-Q4_K_M", "llama-3.1-8b-instruct")
    assert not names_match("Meta-Llama-3.1-8B-Instruct-Q4_K_M", "llama-3.2-1b-instruct")


def test_name_parts_strip_org_extension_and_quantisation() -> None:
    assert name_parts("org/Model-7B.IQ4_XS.gguf") == ["model", "7b"]


def test_mismatched_models_most_requests_first() -> None:
    models = {"smollm2-135m-instruct": 5, "gpt-4o": 2, "claude": 9}
    assert list(mismatched_models(SMOL_GGUF, models).items()) == [("claude", 9), ("gpt-4o", 2)]


def test_the_tokenizer_warning_names_the_other_models_and_the_fix() -> None:
    from kvroute.trace.model_names import tokenizer_warning

    text = tokenizer_warning("SmolLM2-135M-Instruct", {"llama-3.1-8b": 40, "smollm2-135m": 1})
    assert text is not None
    assert "tokenizer SmolLM2-135M-Instruct" in text and "llama-3.1-8b (40 requests)" in text
    assert "--tokenizer PATH" in text and "smollm2" not in text
    assert tokenizer_warning("SmolLM2-135M-Instruct", {"SmolLM2-135M-Instruct": 3}) is None
    assert tokenizer_warning(None, {"llama-3.1-8b": 3}) is None  # nothing tokenized here
