"""The interface every trace format implements, and the helpers they share.

A format turns one decoded record (a JSON object) into zero or more requests. Reading
the file, counting and skipping invalid records is done once, in
:mod:`kvroute.trace.readers`, so every format behaves the same on bad input.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from kvroute.trace.records import Request


class Container(enum.Enum):
    """How records sit in the file."""

    JSONL = "jsonl"
    JSON_ARRAY = "json_array"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Reader settings. ``block_size_tokens`` overrides a hash-only format's block size."""

    block_size_tokens: int | None = None


class RecordError(Exception):
    """A record is malformed. Readers add file and line; ``field`` names the culprit."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class TraceFormat(Protocol):
    """One trace format. A fresh instance reads each file, so ``parse`` may keep
    per-file state (a header line's settings) and nothing else."""

    name: str
    description: str
    container: Container

    def sniff(self, first: Any) -> bool:
        """True when ``first`` (the first decoded record) looks like this format."""
        ...

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        """Requests in one record. ``index`` is the record's 0-based position, ``line`` the 1-based line where it starts.

        Raises :class:`RecordError` for a malformed record; returns an empty list for a
        record that is valid but carries no request (e.g. a header line).
        """
        ...


def require_dict(value: Any, field: str | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise RecordError(f"expected a JSON object, got {kind}", field)
    return value


def opt_str(obj: dict[str, Any], *names: str) -> str | None:
    """The first present field among ``names`` as a string (numbers are converted)."""
    for name in names:
        value = obj.get(name)
        if value is None:
            continue
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
        raise RecordError(f"expected a string, got {type(value).__name__}", name)
    return None


def opt_int(obj: dict[str, Any], name: str, *, minimum: int = 0) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise RecordError(f"expected an integer, got {value!r}", name)
    if value < minimum:
        raise RecordError(f"must be >= {minimum}, got {value}", name)
    return value


def parse_time_s(value: Any, field: str) -> float:
    """Seconds from a number (epoch s, or ms / µs when too large to be seconds) or ISO 8601."""
    if isinstance(value, bool):
        raise RecordError("expected a time, got a boolean", field)
    if isinstance(value, int | float):
        t = float(value)
        if not math.isfinite(t):
            raise RecordError(f"not a finite time: {value!r}", field)
        if t > 1e14:  # microseconds since the epoch
            return t / 1e6
        if t > 1e11:  # milliseconds since the epoch
            return t / 1e3
        return t
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise RecordError(f"not an ISO 8601 time or a number: {value!r}", field) from None
    raise RecordError(f"expected a time, got {type(value).__name__}", field)


def opt_time_s(obj: dict[str, Any], *names: str) -> float | None:
    for name in names:
        if obj.get(name) is not None:
            return parse_time_s(obj[name], name)
    return None


def display_path(path: Path) -> str:
    return str(path)
