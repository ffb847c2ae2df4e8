"""Structured answers checked after a run: parsed, valid against the request's schema,
from the message text or the forced tool call's arguments; failed requests untouched."""

from __future__ import annotations

from kvroute.bench.results.record import ErrorKind, RequestRecord
from kvroute.bench.validate import check_answer, check_record
from kvroute.bench.workloads.base import StructuredKind

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_answers_parse_and_validate_against_their_schema() -> None:
    assert check_answer('{"name": "Ada", "age": 36}', PERSON) == (True, True)
    assert check_answer('{"name": "Ada"}', PERSON) == (True, False)
    assert check_answer('{"name": "Ada", "age": "36"}', PERSON) == (True, False)
    assert check_answer('{"name": "Ada", ', PERSON) == (False, False)
    assert check_answer(None, PERSON) == (False, False)
    assert check_answer("[1, 2]", None) == (True, True)  # no schema: JSON is enough


def test_the_record_is_checked_from_the_text_or_the_tool_arguments() -> None:
    text = RequestRecord(0, 0.0, text='{"name": "Ada", "age": 36}')
    check_record(text, StructuredKind.JSON_SCHEMA, PERSON)
    assert (text.json_parsed, text.schema_valid) == (True, True)
    tool = RequestRecord(1, 0.0, text="prose", tool_arguments='{"name": "Ada"}')
    check_record(tool, StructuredKind.TOOL_ARGS, PERSON)
    assert (tool.json_parsed, tool.schema_valid) == (True, False)


def test_unstructured_and_failed_requests_are_left_unjudged() -> None:
    plain = RequestRecord(0, 0.0, text="not json")
    check_record(plain, StructuredKind.NONE, None)
    failed = RequestRecord(1, 0.0, text='{"name": "Ada", "age": 36}')
    failed.fail(ErrorKind.RESET, "closed", 1.0)
    check_record(failed, StructuredKind.JSON_SCHEMA, PERSON)
    assert (plain.json_parsed, failed.json_parsed, failed.schema_valid) == (None, None, None)
