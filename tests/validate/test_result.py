"""--validate's options are checked where they are made: one usage line for a bad value."""

from __future__ import annotations

import pytest

from kvroute.errors import UsageError
from kvroute.validate.result import ENGINES, CompletionPath, ValidateOptions


def test_a_closed_loop_needs_a_client_and_requests_an_output_token() -> None:
    with pytest.raises(UsageError, match="--concurrency must be at least 1"):
        ValidateOptions(concurrency=0)
    with pytest.raises(UsageError, match="at least 1 token"):
        ValidateOptions(default_output_tokens=0)
    assert ValidateOptions(concurrency=1).concurrency == 1
    assert ValidateOptions().concurrency is None  # the trace's own arrival times


def test_each_engine_is_validated_on_the_openai_completion_paths() -> None:
    assert ENGINES == ("llamacpp", "vllm", "sglang")
    assert {p.value for p in CompletionPath} == {"/v1/chat/completions", "/v1/completions"}
