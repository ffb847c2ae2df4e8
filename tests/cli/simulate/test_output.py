"""``simulate``'s outputs: the JSON carries the result (and --validate's, --latency's when
asked), the HTML page is written, and the summary is left out with --quiet."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import orjson
import pytest
from rich.console import Console

from kvroute.cache.capacity import capacity_from_tokens
from kvroute.cache.result import SimulationResult
from kvroute.cache.simulate import SimulateOptions, TraceSource, simulate
from kvroute.cli.simulate.output import json_bytes, to_json, write_outputs
from kvroute.trace.records import BlockPrompt, Request


@pytest.fixture(scope="module")
def result() -> SimulationResult:
    requests = [
        Request(
            prompt=BlockPrompt(np.array([1, 2, 100 + i], np.uint64), 16, 48),
            arrival_s=float(i),
            output_len=4,
        )
        for i in range(10)
    ]
    return simulate(
        requests,
        capacity_from_tokens(4096),
        TraceSource("t.jsonl", "mooncake"),
        options=SimulateOptions(engines=("vllm",)),
    )


def test_the_json_holds_the_result_and_nothing_it_was_not_given(result: SimulationResult) -> None:
    doc = orjson.loads(to_json(result, None))
    assert doc["trace"]["path"] == "t.jsonl" and [e["engine"] for e in doc["engines"]] == ["vllm"]
    assert doc["engines"][0]["cached_tokens"] == result.engines[0].cached_tokens
    assert "validation" not in doc and "latency" not in doc


def test_numpy_arrays_and_nested_dataclasses_are_written(result: SimulationResult) -> None:
    assert orjson.loads(json_bytes({"a": np.arange(3), "r": result.trace})) == {
        "a": [0, 1, 2],
        "r": orjson.loads(json_bytes(result.trace)),
    }
    with pytest.raises(TypeError, match="not JSON serializable: object"):
        json_bytes(object())


def test_write_outputs_prints_writes_and_keeps_quiet_when_asked(
    result: SimulationResult, tmp_path: Path
) -> None:
    out = io.StringIO()
    json_path, html_path = tmp_path / "r.json", tmp_path / "r.html"
    write_outputs(
        result,
        None,
        Console(file=out, width=200),
        json_path=json_path,
        html_path=html_path,
        quiet=False,
    )
    text = out.getvalue()
    assert "Prefix cache by engine" in text
    assert f"wrote {json_path}" in text and f"wrote {html_path}" in text
    assert orjson.loads(json_path.read_bytes())["schema"] == result.schema
    assert html_path.read_text().startswith("<!DOCTYPE html>")
    quiet = io.StringIO()
    write_outputs(
        result, None, Console(file=quiet, width=200), json_path=None, html_path=None, quiet=True
    )
    assert quiet.getvalue() == ""
