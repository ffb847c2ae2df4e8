"""Structured answers: does the answer parse as JSON, and does it satisfy its schema?

Checked after the run (never on the hot path) for successful requests of structured
workloads: the message content for ``response_format`` requests, the first tool
call's arguments for forced tool calls. Validation uses ``jsonschema`` with the
schema's own draft (2020-12 when it names none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import orjson

from kvroute.bench.results.record import Outcome, RequestRecord
from kvroute.bench.workloads.base import StructuredKind


def check_answer(text: str | None, schema: Mapping[str, Any] | None) -> tuple[bool, bool]:
    """``(parsed, valid)`` for one answer; an answer that does not parse is not valid."""
    if text is None:
        return False, False
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False, False
    if schema is None:
        return True, True
    validator_cls = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    return True, validator_cls(schema).is_valid(value)


def check_record(
    rec: RequestRecord, kind: StructuredKind, schema: Mapping[str, Any] | None
) -> None:
    """Set ``json_parsed`` and ``schema_valid`` on a successful structured request."""
    if kind is StructuredKind.NONE or rec.outcome is not Outcome.OK:
        return
    text = rec.tool_arguments if kind is StructuredKind.TOOL_ARGS else rec.text
    rec.json_parsed, rec.schema_valid = check_answer(text, schema)
