"""Small file and argument helpers shared by the CLI commands.

Output paths are checked before a command starts its work (:func:`check_outputs`), so
a run of minutes is not lost to a typo in ``--html``, and written through
:mod:`kvroute.output_file` (:func:`emit`), which never replaces a link, FIFO or device.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from kvroute.errors import KvrouteError, UsageError
from kvroute.output_file import own_stream_fd, write_all, write_output
from kvroute.report.page.html import Page, render_page

STDOUT = Path("-")
"""The output path meaning "standard output", where a command documents it."""

FileKey = tuple[int, int] | str
"""What makes two paths the same file: (device, inode) when it exists, else its real path."""


def writes_stdout(*paths: Path | None) -> bool:
    """Whether an output goes to standard output (``-`` or ``/dev/stdout``), so the
    command's own messages must go to standard error."""
    return any(p is not None and (p == STDOUT or own_stream_fd(p) == 1) for p in paths)


def _file_key(path: Path) -> FileKey:
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


def _check_output(option: str, path: Path) -> FileKey | None:
    """Raise :class:`UsageError` if ``path`` cannot take ``option``'s output; return its
    key, or None for a character device (``/dev/null`` may take any number of outputs)."""
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise UsageError(
            f"{option} {path}: {blocker} is a file, not a directory",
            hint="give a path in an existing directory",
        ) from None
    except OSError as exc:  # a symlink loop, a name too long
        raise UsageError(
            f"{option} {path}: {exc.strerror}", hint="give a path in an existing directory"
        ) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{option} {path} is a directory", hint="give a file name inside it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path} is not writable", hint="give another path")
        return None if stat.S_ISCHR(st.st_mode) else (st.st_dev, st.st_ino)
    parent = Path(os.path.realpath(path)).parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(
            f"{option} {path}: directory {parent} {what}",
            hint=f"create it (mkdir -p {parent}) or write the file elsewhere",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"{option} {path}: cannot create files in {parent} (permission denied)",
            hint="write the file to a directory you own",
        )
    return (st.st_dev, st.st_ino) if st is not None else os.path.realpath(path)


def check_outputs(outputs: Mapping[str, Path | None], *, inputs: Sequence[Path] = ()) -> None:
    """Refuse, before any work, output paths that cannot be written, that are an input
    (writing would destroy it) or that two outputs share (one would overwrite the other).

    ``outputs`` maps each option as the user knows it (``--json``, ``OUT``) to its path;
    None means not asked for. ``-`` (standard output) and the process's own streams
    (``/dev/stdout``, ``/dev/fd/N``) are not checked as files, but at most one output
    may go to each of them: two documents on one stream could not be told apart.
    """
    input_keys = {_file_key(p): p for p in inputs}
    seen: dict[FileKey, str] = {}
    on_stream: dict[int, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        fd = 1 if path == STDOUT else own_stream_fd(path)
        if fd is not None:
            if fd in on_stream:
                where = "standard output" if fd == 1 else f"file descriptor {fd}"
                raise UsageError(
                    f"{on_stream[fd]} and {option} both write to {where}: "
                    "the two documents would be mixed",
                    hint="send one of them to a file, e.g. --html report.html",
                )
            on_stream[fd] = option
            continue
        key = _check_output(option, path)
        if key is None:
            continue
        if key in input_keys:
            raise UsageError(
                f"{option} {path} is the input {input_keys[key]}: writing would destroy the input",
                hint="give the output another path",
            )
        if key in seen:
            raise UsageError(
                f"{seen[key]} and {option} are both {path}: one would overwrite the other",
                hint="give each output its own path",
            )
        seen[key] = option


@contextlib.contextmanager
def write_errors(path: Path) -> Iterator[None]:
    """Turn a failure to write ``path`` (disk full, permissions changed mid-run) into a
    :class:`KvrouteError` line instead of an internal error."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise KvrouteError(
            f"could not write {path}: {exc.strerror or exc}",
            hint="check the disk has room and the path is writable, or write elsewhere",
        ) from None


def emit(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (``-``: standard output) through
    :func:`kvroute.output_file.write_output`."""
    if path == STDOUT:
        sys.stdout.flush()  # what the command printed before goes first
        write_all(sys.stdout.buffer, data)
        return
    with write_errors(path):
        write_output(path, data)


def emit_page(path: Path, page: Page) -> None:
    """Render an HTML report ``page`` and :func:`emit` it: ``-`` sends it to standard
    output, like ``--json -``, instead of creating a file named ``-``."""
    emit(path, render_page(page).encode("utf-8"))


def parse_pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    """``("a=1", "b=x")`` as ``{"a": "1", "b": "x"}``; ``what`` names the option in errors."""
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad {what} {v!r}", hint=f"use {what} name=value")
        out[key.strip()] = value.strip()
    return out
