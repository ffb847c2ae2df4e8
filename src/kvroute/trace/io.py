"""Streaming file access shared by the trace readers.

Readers never hold a whole log in memory: lines (or the elements of one big JSON
array) are decoded one at a time, with their 1-based line number kept for errors.
``.gz`` files are read transparently.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import orjson

from kvroute.errors import InputError


@dataclass(slots=True)
class ReadStats:
    """Counts kept while reading; ``skipped`` lists the first few problems verbatim."""

    num_read: int = 0
    num_skipped: int = 0
    bytes_read: int = 0
    first_problems: list[str] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)
    """Line numbers of the first ``MAX_SKIPPED_LINES`` skipped records."""

    def skip(self, err: InputError) -> None:
        self.num_skipped += 1
        if len(self.first_problems) < 5:
            self.first_problems.append(str(err))
        if err.line is not None and len(self.skipped_lines) < MAX_SKIPPED_LINES:
            self.skipped_lines.append(err.line)

    def skipped_text(self, path: str, name: str) -> str | None:
        """``skipped 2 invalid records (lines 6, 7), e.g. <the first problem>``, with
        ``path`` written as ``name`` (``-`` for stdin); None when nothing was skipped."""
        if not self.num_skipped:
            return None
        lines = ", ".join(str(n) for n in self.skipped_lines)
        more = "" if self.num_skipped <= len(self.skipped_lines) else ", ..."
        where = f" (line{'' if self.num_skipped == 1 else 's'} {lines}{more})" if lines else ""
        first = self.first_problems[0].replace(path, name) if self.first_problems else ""
        noun = "record" if self.num_skipped == 1 else "records"
        return f"skipped {self.num_skipped:,} invalid {noun}{where}" + (
            f", e.g. {first}" if first else ""
        )


MAX_SKIPPED_LINES = 20


def open_text(path: Path) -> IO[str]:
    """Open a trace file for reading as UTF-8 text (gzip when the name ends in .gz)."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
        return path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", path=str(path), hint="check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory, not a trace file", path=str(path)) from None
    except PermissionError:
        raise InputError("permission denied", path=str(path)) from None


def head_text(path: Path, num_chars: int = 65536) -> str:
    """The first characters of a file, for format detection."""
    with open_text(path) as f:
        try:
            return f.read(num_chars)
        except UnicodeDecodeError:
            raise InputError(
                "not UTF-8 text", path=str(path), hint="is this a binary file?"
            ) from None
        except (OSError, EOFError) as exc:
            raise InputError(f"cannot read: {exc}", path=str(path)) from None


def open_binary(path: Path) -> IO[bytes]:
    """Open a trace file for reading as bytes (gzip when the name ends in .gz)."""
    try:
        if path.suffix == ".gz":
            return cast(IO[bytes], gzip.open(path, "rb"))
        return path.open("rb")
    except FileNotFoundError:
        raise InputError("no such file", path=str(path), hint="check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory, not a trace file", path=str(path)) from None
    except PermissionError:
        raise InputError("permission denied", path=str(path)) from None


def iter_json_lines(path: Path, stats: ReadStats | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, decoded_object)`` for each non-blank line of a JSONL file.

    A line that is not valid JSON is yielded as an :class:`InputError` naming the line,
    in place of the object; the caller decides whether to skip it. ``stats.bytes_read``
    advances as lines are read, for progress bars.
    """
    with open_binary(path) as f:
        line_no = 0
        try:
            for line in f:
                line_no += 1
                if stats is not None:
                    stats.bytes_read += len(line)
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    yield (
                        line_no,
                        InputError(f"invalid JSON ({exc.msg})", path=str(path), line=line_no),
                    )
                    continue
                yield line_no, obj
        except (OSError, EOFError) as exc:
            raise InputError(f"cannot read: {exc}", path=str(path), line=line_no + 1) from None


def iter_json_array(path: Path, chunk_chars: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, element)`` for each element of a top-level JSON array.

    Decodes incrementally so a multi-GB ShareGPT file never sits in memory whole; the
    line number is where the element starts.
    """
    decoder = json.JSONDecoder()
    with open_text(path) as f:
        buf = ""
        pos = 0
        line_no = 1
        eof = False

        def fill() -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            chunk = f.read(chunk_chars)
            if not chunk:
                eof = True
                return False
            buf = buf[pos:] + chunk
            pos = 0
            return True

        def skip_ws() -> None:
            nonlocal pos, line_no
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    if buf[pos] == "\n":
                        line_no += 1
                    pos += 1
                if pos < len(buf) or not fill():
                    return

        skip_ws()
        if pos >= len(buf) or buf[pos] != "[":
            raise InputError("expected a JSON array", path=str(path), line=line_no)
        pos += 1
        first = True
        while True:
            skip_ws()
            if pos >= len(buf):
                raise InputError(
                    "unexpected end of file inside the JSON array", path=str(path), line=line_no
                )
            if buf[pos] == "]":
                return
            if not first:
                if buf[pos] != ",":
                    raise InputError(
                        "expected ',' between array elements", path=str(path), line=line_no
                    )
                pos += 1
                skip_ws()
            first = False
            while True:
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError as exc:
                    if fill():
                        continue
                    raise InputError(
                        f"invalid JSON ({exc.msg})", path=str(path), line=line_no
                    ) from None
                # An element that ends exactly at the buffer end may be a truncated number.
                if end == len(buf) and fill():
                    continue
                break
            start_line = line_no
            line_no += buf.count("\n", pos, end)
            pos = end
            yield start_line, obj
