"""The one record encoder: its two parts join into exactly what serialising the whole
record gives, and ``kvroute export`` (:class:`TraceWriter`) and the gateway's capture
write one request as the same record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvroute.gateway.capture.records import CaptureEvent, CaptureRecords
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.hashing import key_id
from kvroute.trace.readers import read_trace
from kvroute.trace.records import Request, RequestAttrs, StructuredOutput, TokenPrompt
from kvroute.trace.tokenizer import load_tokenizer
from kvroute.trace.writer import (
    TraceWriter,
    header_line,
    prompt_fields,
    prompt_json,
    record_line,
    request_fields,
)

KEY = bytes(range(32))

maybe_int = st.none() | st.integers(0, 1 << 40)
maybe_str = st.none() | st.text(max_size=8)


@given(
    st.tuples(
        st.none() | st.floats(0, 2e9),
        st.none() | st.floats(0, 2e9),
        st.none() | st.integers(100, 599),
        maybe_str,
        maybe_str,
        maybe_str,
        maybe_int,
        maybe_str,
        maybe_str,
        maybe_int,
        maybe_int,
    ),
    maybe_int,
    maybe_int,
    st.booleans(),
    st.sampled_from(list(StructuredOutput)),
    st.integers(0, 5000),
    st.lists(st.integers(0, (1 << 64) - 1), max_size=5),
)
def test_the_two_parts_join_into_the_whole_records_json(
    request_args: tuple[Any, ...],
    turn: int | None,
    messages: int | None,
    tools: bool,
    structured: StructuredOutput,
    input_len: int,
    hashes: list[int],
) -> None:
    head = request_fields(*request_args)
    fields = prompt_fields(turn, messages, tools, structured)
    line = record_line(head, prompt_json(fields, input_len, orjson.dumps(hashes)))
    whole = head | fields | {"hashes": hashes}
    assert line == orjson.dumps(whole)
    assert None not in orjson.loads(line).values()


def test_header_line_names_the_scheme_and_key() -> None:
    plain = orjson.loads(header_line(16, None))
    assert plain == {
        "kvroute_trace": 1,
        "block_size": 16,
        "hash_scheme": "kvroute-chain-v1",
        "seed": plain["seed"],
    }
    keyed = header_line(32, "0123456789abcdef", source="kvroute serve capture")
    assert keyed.endswith(b"\n")
    assert list(orjson.loads(keyed)) == [
        "kvroute_trace",
        "block_size",
        "hash_scheme",
        "seed",
        "source",
        "key_id",
    ]


def test_export_and_capture_write_one_request_as_one_record(tmp_path: Path) -> None:
    tokenizer = load_tokenizer()
    messages = [
        {"role": "system", "content": "You answer in one word. " * 20},
        {"role": "user", "content": "Which colour is the sky?"},
    ]
    ids = tokenizer.encode_chat(messages)
    captured = CaptureRecords(
        PromptTokens(tokenizer), block_size_tokens=16, include_text=False, key=KEY
    )
    event = CaptureEvent(
        {"model": "m", "messages": messages}, 1.5, 2.25, None, "m", None, "", 200, None, 7, 3
    )
    [line], _ = captured.render([event])
    assert isinstance(line, bytes)
    path = tmp_path / "export.jsonl"
    with TraceWriter(path, key=KEY) as writer:
        writer.append(
            Request(
                prompt=TokenPrompt(np.asarray(ids, dtype=np.uint32)),
                arrival_s=1.5,
                end_s=2.25,
                model="m",
                output_len=7,
                reported_cached_tokens=3,
                attrs=RequestAttrs(turn_index=0, num_messages=2),
            )
        )
    header, exported = path.read_bytes().splitlines()
    # the export has no HTTP status (it reads logs); everything else is the same bytes
    assert line == exported.replace(b'"end_t":2.25,', b'"end_t":2.25,"status":200,')
    [req] = list(read_trace(path))
    assert req.output_len == 7 and req.attrs.num_messages == 2
    assert orjson.loads(header)["key_id"] == key_id(KEY)


@pytest.mark.parametrize("structured", [StructuredOutput.NONE, StructuredOutput.JSON_SCHEMA])
def test_prompt_fields_leave_out_what_is_not_there(structured: StructuredOutput) -> None:
    fields = prompt_fields(None, 3, False, structured)
    expected: dict[str, Any] = {"messages": 3}
    if structured is not StructuredOutput.NONE:
        expected["structured"] = structured.value
    assert fields == expected
