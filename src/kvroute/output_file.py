"""Writing an output file (a result, a report, a trace) without replacing what the path names.

Every file a kvroute command writes goes through :func:`open_output`. What happens
depends on what the path names when the write starts:

- a regular file, or nothing yet: the data goes to a temporary file in the same
  directory, renamed over the path once complete, so a reader never sees half a file
  and a failed write leaves the old file as it was; an existing file keeps its
  permission bits, a new one gets 0o644;
- a symbolic link: the same, on the file the link resolves to; the link stays a link;
- one of the process's own streams (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
  ``/proc/self/fd/N``): the data is written to that descriptor, after what the process
  already wrote there;
- anything else that exists (a FIFO, a character device such as ``/dev/null``): the
  data is written straight into it, since a rename would put a plain file in its place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

NEW_FILE_MODE = 0o644

_OWN_STREAM = re.compile(r"/dev/(?:std(out|err)|fd/(\d+))|/proc/self/fd/(\d+)")
_STREAM_FDS = {"out": 1, "err": 2}


def own_stream_fd(path: str | os.PathLike[str]) -> int | None:
    """The file descriptor ``path`` names when it is one of this process's own streams
    (``/dev/stdout`` is 1, ``/dev/fd/3`` is 3), else None."""
    m = _OWN_STREAM.fullmatch(os.fspath(path))
    if m is None:
        return None
    if m.group(1):
        return _STREAM_FDS[m.group(1)]
    return int(m.group(2) or m.group(3))


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content to (see the module docstring).

    On leaving the block without an exception the content is in place; on an exception
    a regular file is left untouched and the temporary file removed (a FIFO or device
    keeps whatever was already written to it). Raises :class:`OSError` when the file
    cannot be created or written.
    """
    fd = own_stream_fd(path)
    if fd is not None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        with os.fdopen(os.dup(fd), "wb") as out:
            yield out
        return
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "wb") as out:
            yield out
        return
    # A symlink (even a dangling one) is followed: its target is what gets replaced.
    target = Path(os.path.realpath(path))
    mode = stat.S_IMODE(st.st_mode) if st is not None else NEW_FILE_MODE
    tmp_fd, tmp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".part", dir=target.parent
    )
    try:
        with os.fdopen(tmp_fd, "wb") as tmp:
            yield tmp
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def write_all(out: IO[bytes], data: bytes) -> None:
    """Write all of ``data`` to ``out``, raising :class:`OSError` if it cannot.

    A buffered binary file may take part of a large write and return the count: a pipe
    whose reader exits mid-write (``| head -1``) takes up to its capacity, and the rest
    would be dropped without an error. Writing the remainder raises the error instead
    (:class:`BrokenPipeError` there).
    """
    view = memoryview(data)
    while view:
        num_written = out.write(view)
        if not num_written:  # never expected of a blocking file; do not spin
            raise OSError(errno.EIO, "the output took no data")
        view = view[num_written:]
    out.flush()


def write_output(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` as ``path``'s whole content through :func:`open_output`."""
    with open_output(path) as out:
        write_all(out, data)
