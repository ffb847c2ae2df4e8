"""``simulate``'s trace: read once, skipped lines said, every request seen by the tap,
and the ideal cache measured on the same requests."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from kvroute.cli.simulate.trace import ideal_cache, load_trace
from kvroute.errors import InputError
from kvroute.trace.records import BlockPrompt, Request


def mooncake(path: Path, *, bad_line: bool = False) -> Path:
    """20 requests of 3 blocks; the first two blocks are every request's."""
    lines = [
        json.dumps(
            {
                "timestamp": i * 100,
                "input_length": 1536,
                "output_length": 8,
                "hash_ids": [1, 2, 100 + i],
            }
        )
        for i in range(20)
    ]
    if bad_line:
        lines.insert(5, '{"timestamp": "soon"}')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_whole_trace_is_read_and_the_tap_sees_every_request(tmp_path: Path) -> None:
    seen: list[Request] = []
    console = Console(file=io.StringIO())
    requests, source = load_trace(
        mooncake(tmp_path / "t.jsonl"), None, None, None, False, console, tap=seen.append
    )
    assert len(requests) == 20 and seen == requests
    assert all(isinstance(r.prompt, BlockPrompt) for r in requests)
    assert (source.path, source.format, source.tokenizer, source.num_skipped) == (
        str(tmp_path / "t.jsonl"), "mooncake", None, 0
    )  # fmt: skip


def test_a_bad_line_is_one_error_or_skipped_and_said(tmp_path: Path) -> None:
    path = mooncake(tmp_path / "t.jsonl", bad_line=True)
    with pytest.raises(InputError) as info:
        load_trace(path, None, None, None, False, Console(file=io.StringIO()))
    assert info.value.message == f"{path}:6, field 'hash_ids': expected a list of integers"
    assert "--skip-invalid" in str(info.value)
    out = io.StringIO()
    requests, source = load_trace(path, None, None, None, True, Console(file=out, width=200))
    assert len(requests) == 20 and source.num_skipped == 1
    assert out.getvalue().startswith("skipped 1 invalid record (line 6), e.g. ")


def test_the_ideal_cache_counts_the_shared_blocks(tmp_path: Path) -> None:
    console = Console(file=io.StringIO())
    requests, source = load_trace(mooncake(tmp_path / "t.jsonl"), None, None, None, False, console)
    ideal = ideal_cache(requests, source, 512, console)
    # after the first request, two of each request's three blocks were seen before
    assert ideal.hit_ratio == pytest.approx(19 * 2 / (20 * 3))
    assert ideal.granularity == "block"
