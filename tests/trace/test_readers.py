"""Every reader on files the tests write; detection; bad input reported with file, line, field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvroute.errors import EmptyTraceError, InputError, UsageError
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.io import ReadStats, iter_json_array
from kvroute.trace.readers import detect_format, read_trace
from kvroute.trace.records import BlockPrompt, ChatPrompt, StructuredOutput, TextPrompt


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_openai_bare_and_wrapped(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "log.jsonl",
        [
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            {
                "timestamp": "2026-01-02T03:04:05Z",
                "session_id": "s1",
                "request": {
                    "model": "m",
                    "user": "u9",
                    "messages": [
                        {"role": "system", "content": "sys"},
                        {"role": "user", "content": "a"},
                        {"role": "assistant", "content": "b"},
                        {"role": "user", "content": "c"},
                    ],
                    "tools": [{"type": "function", "function": {"name": "f"}}],
                    "response_format": {"type": "json_schema", "json_schema": {}},
                },
                "response": {
                    "choices": [{"message": {"content": "done"}}],
                    "usage": {
                        "completion_tokens": 7,
                        "prompt_tokens_details": {"cached_tokens": 5},
                    },
                },
                "latency_s": 1.5,
            },
            {"prompt": "complete me", "model": "m", "guided_regex": "a+"},
        ],
    )
    assert detect_format(path) == "openai"
    bare, wrapped, completion = list(read_trace(path))
    assert isinstance(bare.prompt, ChatPrompt) and bare.arrival_s is None
    assert wrapped.session_id == "s1" and wrapped.user_id == "u9"
    assert wrapped.arrival_s == pytest.approx(1767323045.0)
    assert wrapped.end_s == pytest.approx(1767323046.5)
    assert (wrapped.output_len, wrapped.reported_cached_tokens, wrapped.output_text) == (
        7,
        5,
        "done",
    )
    assert (
        wrapped.attrs.has_tools and wrapped.attrs.structured_output is StructuredOutput.JSON_SCHEMA
    )
    assert (wrapped.attrs.turn_index, wrapped.attrs.num_messages) == (1, 4)
    assert isinstance(completion.prompt, TextPrompt)
    assert completion.attrs.structured_output is StructuredOutput.REGEX


def test_sharegpt_array_turns_become_requests(tmp_path: Path) -> None:
    conv = {
        "id": "c1",
        "conversations": [
            {"from": "system", "value": "be brief"},
            {"from": "human", "value": "q1"},
            {"from": "gpt", "value": "a1"},
            {"from": "human", "value": "q2"},
            {"from": "gpt", "value": "a2"},
        ],
    }
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([conv, {**conv, "id": "c2"}], indent=2))
    assert detect_format(path) == "sharegpt"
    reqs = list(read_trace(path))
    assert [r.session_id for r in reqs] == ["c1", "c1", "c2", "c2"]
    second = reqs[1]
    assert isinstance(second.prompt, ChatPrompt)
    assert [m["content"] for m in second.prompt.messages] == ["be brief", "q1", "a1", "q2"]
    assert second.output_text == "a2" and second.attrs.turn_index == 1
    assert reqs[2].source_line > reqs[0].source_line  # line numbers follow the file


def test_sharegpt_jsonl_with_openai_roles(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "sg.jsonl",
        [{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}],
    )
    assert detect_format(path) == "sharegpt"
    (req,) = read_trace(path)
    assert req.output_text == "y"


def test_mooncake_and_block_size_override(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mc.jsonl",
        [
            {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
            {"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [1, 3]},
        ],
    )
    assert detect_format(path) == "mooncake"
    _, b = read_trace(path)
    assert isinstance(b.prompt, BlockPrompt)
    assert (b.arrival_s, b.prompt.block_size_tokens, b.prompt.num_tokens) == (1.5, 512, 600)
    with pytest.raises(InputError) as err:
        list(read_trace(path, options=ReadOptions(block_size_tokens=256)))
    assert err.value.line == 1 and err.value.field == "input_length"
    assert "--block-size" in str(err.value)


def test_mooncake_keeps_the_optional_model_and_session(tmp_path: Path) -> None:
    """Exports that add ``model`` and ``chat_id`` keep them (analyze groups by model)."""
    path = write_jsonl(
        tmp_path / "mc.jsonl",
        [
            {"input_length": 10, "hash_ids": [1], "model": "qwen2-7b", "chat_id": 7},
            {"input_length": 10, "hash_ids": [2]},
            {"input_length": 10, "hash_ids": [3], "model": ["not", "a", "name"]},
        ],
    )
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    assert (err.value.line, err.value.field) == (3, "model")
    first, second = list(read_trace(path, skip_invalid=True))
    assert (first.model, first.session_id) == ("qwen2-7b", "7")
    assert (second.model, second.session_id) == (None, None)


def test_kvroute_trace_header_sets_block_size(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "kv.jsonl",
        [
            {"kvroute_trace": 1, "block_size": 4},
            {
                "t": 1.0,
                "input_len": 6,
                "hashes": [11, 12],
                "session": "s",
                "structured": "json_object",
                "tools": True,
            },
        ],
    )
    assert detect_format(path) == "kvroute"
    (req,) = read_trace(path)
    assert isinstance(req.prompt, BlockPrompt) and req.prompt.block_size_tokens == 4
    assert req.attrs.structured_output is StructuredOutput.JSON_OBJECT and req.attrs.has_tools


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    path = tmp_path / "mc.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(
            json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [9]})
            + "\n"
        )
    (req,) = read_trace(path)
    assert isinstance(req.prompt, BlockPrompt) and req.prompt.block_hashes.tolist() == [9]


def test_json_array_streams_across_small_chunks(tmp_path: Path) -> None:
    items = [{"n": i, "text": "x" * (i % 37), "f": 1.25} for i in range(300)]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(items, indent=1))
    got = [obj for _, obj in iter_json_array(path, chunk_chars=17)]
    assert got == items


# ---- bad input ----------------------------------------------------------------------


def test_malformed_line_names_file_line_and_field(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "log.jsonl",
        [
            {"model": "m", "messages": [{"role": "user", "content": "ok"}]},
            {"model": "m", "messages": [{"content": "no role"}]},
        ],
    )
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    e = err.value
    assert (e.path, e.line, e.field) == (str(path), 2, "messages[0].role")
    assert str(path) in str(e) and ":2" in str(e) and "--skip-invalid" in str(e)


def test_invalid_json_line_and_skip_invalid(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(
        '{"model": "m", "prompt": "a"}\n{broken\n{"model": "m", "prompt": 5}\n{"model": "m", "prompt": "b"}\n'
    )
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    assert err.value.line == 2 and "invalid JSON" in str(err.value)
    stats = ReadStats()
    reqs = list(read_trace(path, skip_invalid=True, stats=stats))
    assert len(reqs) == 2 and stats.num_skipped == 2 and stats.num_read == 2
    assert "prompt" in stats.first_problems[1]


def test_empty_and_unknown_and_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(EmptyTraceError):
        list(read_trace(empty))
    unknown = write_jsonl(tmp_path / "u.jsonl", [{"hello": 1}])
    with pytest.raises(InputError) as err:
        detect_format(unknown)
    assert "--format" in str(err.value)
    with pytest.raises(InputError, match="no such file"):
        list(read_trace(tmp_path / "missing.jsonl"))
    with pytest.raises(UsageError, match="valid: bailian, kvroute, mooncake, openai, sharegpt"):
        list(read_trace(unknown, "nope"))


def test_all_invalid_is_empty_with_count(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mc.jsonl", [{"timestamp": 0, "input_length": 99999, "hash_ids": [1]}]
    )
    with pytest.raises(EmptyTraceError, match="1 invalid records skipped"):
        list(read_trace(path, skip_invalid=True))


def test_non_utf8_line_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"model": "m", "prompt": "a"}\n{"prompt": "\xff\xfe"}\n')
    with pytest.raises(InputError) as err:
        list(read_trace(path, "openai"))
    assert err.value.line == 2


def test_hash_ids_must_be_integers_or_strings(tmp_path: Path) -> None:
    """Strings are ids too (kvcache-simulator accepts them); anything else is refused."""
    for bad in (["a", None], [-1], [{"id": 1}]):
        path = write_jsonl(
            tmp_path / "mc.jsonl", [{"timestamp": 0, "input_length": 5, "hash_ids": bad}]
        )
        with pytest.raises(InputError) as err:
            list(read_trace(path))
        assert err.value.field == "hash_ids"


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({"kvroute_trace": 2, "block_size": 4}, "kvroute_trace"),
        ({"kvroute_trace": True, "block_size": 4}, "kvroute_trace"),
        ({"kvroute_trace": 1, "block_size": "big"}, "block_size"),
    ],
)
def test_unusable_kvroute_header_is_fatal_even_with_skip_invalid(
    tmp_path: Path, header: dict[str, object], field: str
) -> None:
    # Skipping the header would read the records with the wrong block size / layout.
    path = write_jsonl(tmp_path / "kt.jsonl", [header, {"input_len": 6, "hashes": [11, 12]}])
    for skip in (False, True):
        stats = ReadStats()
        with pytest.raises(InputError) as err:
            list(read_trace(path, skip_invalid=skip, stats=stats))
        assert (err.value.line, err.value.field) == (1, field)
        assert err.value.hint is not None and "--skip-invalid" not in err.value.hint
        assert stats.num_read == 0


def test_a_wrong_format_gets_the_format_hint_not_the_skip_hint(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mc.jsonl",
        [{"timestamp": i, "input_length": 5, "hash_ids": [1]} for i in range(3)],
    )
    with pytest.raises(InputError) as err:
        list(read_trace(path, "openai"))
    hint = err.value.hint or ""
    assert "looks like a mooncake trace: drop --format openai" in hint
    assert "--skip-invalid" not in hint
    with pytest.raises(EmptyTraceError) as empty:  # skipping every record says why too
        list(read_trace(path, "openai", skip_invalid=True))
    assert "looks like a mooncake trace" in (empty.value.hint or "")


def test_the_format_hint_reads_an_openai_trace(tmp_path: Path) -> None:
    path = tmp_path / "oa.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(InputError) as err:
        list(read_trace(path, "mooncake"))
    assert "the file looks like an openai trace: drop --format mooncake" in (err.value.hint or "")


def test_one_block_is_one_block_in_the_message(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mc.jsonl", [{"timestamp": 0, "input_length": 2000, "hash_ids": [1]}]
    )
    with pytest.raises(InputError) as err:
        list(read_trace(path, "mooncake"))
    assert "1 block of 512 tokens cannot hold 2000 tokens" in str(err.value)
