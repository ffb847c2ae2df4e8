"""Parse the Prometheus text exposition format (what every engine's ``/metrics`` serves).

Pure: text in, a :class:`Metrics` value out. Handles what llama.cpp, vLLM and SGLang
emit: ``# HELP`` / ``# TYPE`` lines, metric names with colons, label sets with escaped
quotes, values such as ``1.5e+06``, ``NaN`` and ``+Inf``, optional timestamps, and
OpenMetrics' ``# EOF``. Lookups match a label *subset*, so a caller asks for
``vllm:num_requests_running`` without knowing every label a version adds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvroute.errors import EngineError


class MetricsFormatError(EngineError):
    """A ``/metrics`` body is not valid Prometheus text."""


Labels = tuple[tuple[str, str], ...]
"""A sample's labels as sorted ``(name, value)`` pairs, so equal sets compare equal."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of a metric: name, labels and value."""

    name: str
    labels: Labels
    value: float

    def label(self, name: str) -> str | None:
        """The value of label ``name``, or None when the sample has no such label."""
        for key, value in self.labels:
            if key == name:
                return value
        return None

    def matches(self, wanted: Mapping[str, str]) -> bool:
        """True when every label in ``wanted`` is present with the same value."""
        return all(self.label(key) == value for key, value in wanted.items())


@dataclass(frozen=True, slots=True)
class Metrics:
    """Every sample of one scrape, plus the ``HELP`` and ``TYPE`` metadata per family."""

    samples: tuple[Sample, ...]
    help_by_name: Mapping[str, str] = field(default_factory=dict)
    type_by_name: Mapping[str, str] = field(default_factory=dict)

    def find(self, name: str, labels: Mapping[str, str] | None = None) -> list[Sample]:
        """All samples called ``name`` whose labels include ``labels``."""
        wanted = labels or {}
        return [s for s in self.samples if s.name == name and s.matches(wanted)]

    def total(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """Sum of the matching samples; None when there is none (absent ≠ zero).

        Summing is right for counters and load gauges split by label (per model, per
        ``cache_source``, per ``is_streaming``); use :meth:`find` where it is not.
        """
        found = self.find(name, labels)
        return math.fsum(s.value for s in found) if found else None

    def has(self, name: str) -> bool:
        """True when at least one sample called ``name`` is present."""
        return any(s.name == name for s in self.samples)

    def help(self, name: str) -> str | None:
        """The ``# HELP`` text of family ``name``, unescaped; None when absent."""
        return self.help_by_name.get(name)


def parse_metrics(text: str) -> Metrics:
    """Parse one exposition body. Raises :class:`MetricsFormatError` on a malformed line.

    Unknown comment lines are ignored, as Prometheus does. The line number of a
    malformed line is in the message.
    """
    samples: list[Sample] = []
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            _parse_comment(line, helps, types)
            continue
        try:
            samples.append(_parse_sample(line))
        except ValueError as exc:
            raise MetricsFormatError(f"metrics line {line_no}: {exc}: {raw!r}") from None
    return Metrics(samples=tuple(samples), help_by_name=helps, type_by_name=types)


def _parse_comment(line: str, helps: dict[str, str], types: dict[str, str]) -> None:
    parts = line[1:].strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in ("HELP", "TYPE"):
        return
    text = parts[2] if len(parts) == 3 else ""
    if parts[0] == "HELP":
        helps[parts[1]] = _unescape_help(text)
    else:
        types[parts[1]] = text.strip()


def _parse_sample(line: str) -> Sample:
    brace = line.find("{")
    space = _first_space(line)
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        labels, end = _parse_labels(line, brace + 1)
        rest = line[end:]
    else:
        if space == -1:
            raise ValueError("no value")
        name, rest = line[:space], line[space:]
    if not _is_metric_name(name):
        raise ValueError(f"bad metric name {name!r}")
    fields = rest.split()
    if not fields or len(fields) > 2:
        raise ValueError("expected a value and an optional timestamp")
    return Sample(
        name=name, labels=tuple(sorted(labels)) if brace != -1 else (), value=_float(fields[0])
    )


def _parse_labels(line: str, pos: int) -> tuple[list[tuple[str, str]], int]:
    """Parse ``a="x",b="y"}`` starting at ``pos``; return pairs and the index after ``}``."""
    labels: list[tuple[str, str]] = []
    n = len(line)
    while True:
        while pos < n and line[pos] in " ,":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        eq = line.find("=", pos)
        if eq == -1:
            raise ValueError("unterminated label set")
        key = line[pos:eq].strip()
        if not key or not _is_label_name(key):
            raise ValueError(f"bad label name {key!r}")
        pos = eq + 1
        if pos >= n or line[pos] != '"':
            raise ValueError(f"label {key!r} value is not quoted")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise ValueError(f"unterminated value of label {key!r}")
            ch = line[pos]
            if ch == "\\" and pos + 1 < n:
                chars.append(
                    {"n": "\n", "\\": "\\", '"': '"'}.get(line[pos + 1], "\\" + line[pos + 1])
                )
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            chars.append(ch)
            pos += 1
        labels.append((key, "".join(chars)))


def _first_space(line: str) -> int:
    for i, ch in enumerate(line):
        if ch in " \t":
            return i
    return -1


def _float(text: str) -> float:
    special = {"+inf": math.inf, "inf": math.inf, "-inf": -math.inf, "nan": math.nan}
    lowered = text.lower()
    if lowered in special:
        return special[lowered]
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"bad value {text!r}") from None


def _is_metric_name(name: str) -> bool:
    if not name or name[0].isdigit():
        return False
    return all(ch.isascii() and (ch.isalnum() or ch in "_:") for ch in name)


def _is_label_name(name: str) -> bool:
    if name[0].isdigit():
        return False
    return all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name)


def _unescape_help(text: str) -> str:
    """HELP text escapes only backslash and newline."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "n\\":
            out.append("\n" if text[i + 1] == "n" else "\\")
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
