"""``simulate``'s engines and KV pool from the command line: token counts read as typed,
every bad value one usage error that says what to give."""

from __future__ import annotations

import pytest

from kvroute.cli.simulate.capacity import (
    parse_engines,
    parse_sizes,
    parse_tokens,
    resolve_capacity,
)
from kvroute.errors import UsageError


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("65536", 65536), ("64k", 64_000), ("64Ki", 65_536), ("1.5M", 1_500_000), (" 2 Mi ", 2 << 20)],
)
def test_token_counts_read_as_typed(text: str, tokens: int) -> None:
    assert parse_tokens(text, "--capacity-tokens") == tokens


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("80GiB", "counts tokens, but '80GiB' is a size in bytes", "--model M --gpu"),
        ("lots", "cannot read --capacity-tokens 'lots'", "65536, 64k"),
        ("1.5k5", "cannot read --capacity-tokens '1.5k5'", "65536, 64k"),
        ("0.5", "'0.5' is not a whole number of tokens", "e.g. 65536"),
    ],
)
def test_a_bad_token_count_says_what_to_give(text: str, message: str, hint: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_tokens(text, "--capacity-tokens")
    assert message in info.value.message and hint in (info.value.hint or "")


def test_engines_are_registered_names_each_once() -> None:
    assert parse_engines("vllm, sglang") == ("vllm", "sglang")
    with pytest.raises(UsageError, match="empty"):
        parse_engines(" , ")
    with pytest.raises(UsageError, match="twice"):
        parse_engines("vllm,vllm")
    with pytest.raises(UsageError) as info:
        parse_engines("vllm,trt")
    assert "llamacpp" in info.value.message  # the error lists the valid names


def test_sweep_sizes_are_sorted_once_each_and_finite() -> None:
    assert parse_sizes("1M,64k,64k,256k") == (64_000, 256_000, 1_000_000)
    with pytest.raises(UsageError, match="finite token counts, not 'inf'"):
        parse_sizes("64k,inf")
    with pytest.raises(UsageError, match="positive sizes"):
        parse_sizes("0,64k")
    with pytest.raises(UsageError, match="positive sizes"):
        parse_sizes(",")


def _capacity(**given: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "capacity_tokens": None,
        "capacity_blocks": None,
        "block_size": 16,
        "model": None,
        "gpu": None,
        "num_gpus": 1,
        "gpu_util": 0.9,
        "kv_dtype": "auto",
        "weights_gib": None,
        "overhead_gib": None,
    }
    return resolve_capacity(**{**args, **given})  # type: ignore[arg-type]


def test_the_pool_is_given_in_tokens_or_blocks_or_sized_from_the_gpu() -> None:
    assert _capacity(capacity_tokens="64Ki").tokens == 65_536
    assert _capacity(capacity_tokens="inf").tokens is None  # unbounded
    assert _capacity(capacity_blocks=100, block_size=16).tokens == 1600
    sized = _capacity(model="llama-3.1-8b", gpu="h100-80gb")
    assert sized.tokens is not None and sized.tokens > 100_000
    # more memory for the pool: a bigger pool
    assert _capacity(model="llama-3.1-8b", gpu="h100-80gb", num_gpus=2).tokens > sized.tokens  # type: ignore[operator]


def test_two_ways_of_sizing_the_pool_at_once_are_refused() -> None:
    with pytest.raises(UsageError, match="not both"):
        _capacity(capacity_tokens="64k", capacity_blocks=10)
    with pytest.raises(UsageError, match="--gpu sizes the pool from memory"):
        _capacity(capacity_tokens="64k", gpu="h100-80gb")
