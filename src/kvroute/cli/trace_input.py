"""The TRACE argument of ``analyze`` and ``simulate``: a file, or ``-`` for standard input.

The trace readers open their file more than once (the format is detected from the first
record, then the file is read from the start), so standard input is first copied into
a temporary file, deleted when the command ends. A gzip stream is recognised by its
first bytes, as a ``.gz`` file is by its name. Errors about the copy name it
``<stdin>``, not the temporary path.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kvroute.errors import InputError, UsageError

STDIN = Path("-")
"""The TRACE argument meaning "read the trace from standard input"."""

STDIN_NAME = "<stdin>"
"""How results and messages name a trace read from standard input."""

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class TraceInput:
    path: Path
    """A file the trace readers can open (for ``-``, the copy of standard input)."""
    name: str
    """How results and messages name the trace: its path as given, or ``<stdin>``."""


def trace_inputs(trace: Path) -> list[Path]:
    """The input files an output must not overwrite (none for standard input)."""
    return [] if trace == STDIN else [trace]


@contextlib.contextmanager
def open_trace(trace: Path) -> Iterator[TraceInput]:
    """``trace`` as given, or for ``-`` standard input copied into a temporary file.

    Raises :class:`UsageError` for ``-`` when standard input is a terminal (nothing was
    piped in; reading would wait for typing), and :class:`InputError` when it cannot
    be read.
    """
    if trace != STDIN:
        yield TraceInput(trace, str(trace))
        return
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(
            "TRACE is '-' (standard input), but nothing is piped in",
            hint="pipe or redirect a trace into the command: ... | kvroute analyze -",
        )
    with tempfile.TemporaryDirectory(prefix="kvroute-stdin-") as tmp:
        source = sys.stdin.buffer
        try:
            head = source.read(len(_GZIP_MAGIC))
            path = Path(tmp) / ("stdin.gz" if head == _GZIP_MAGIC else "stdin")
            with path.open("wb") as copy:
                copy.write(head)
                shutil.copyfileobj(source, copy, 1 << 20)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=STDIN_NAME) from None
        try:
            yield TraceInput(path, STDIN_NAME)
        except InputError as exc:
            if exc.path != str(path):
                raise
            raise type(exc)(
                exc.bare_message, path=STDIN_NAME, line=exc.line, field=exc.field, hint=exc.hint
            ) from None
