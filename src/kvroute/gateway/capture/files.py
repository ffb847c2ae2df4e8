"""Capture files: kvroute trace JSONL in one directory, rotated by size and age."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kvroute.trace.writer import header_line

if TYPE_CHECKING:
    from kvroute.gateway.config.capture import CaptureConfig


class RotatingTraceFile:
    """kvroute trace files in one directory, rotated by size and age.

    Each file starts with the trace header, is written as ``<name>.part`` and renamed
    to ``<prefix>-<UTC time>-<n>.jsonl`` when rotated or closed. Only the capture
    worker thread calls it.
    """

    def __init__(
        self,
        directory: Path,
        config: CaptureConfig,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory, self.config, self.wall_clock = directory, config, wall_clock
        self.key_id: str | None = None
        """The id of the key the hashes are keyed with (set before the first write);
        None: unkeyed hashes."""
        self.closed_paths: list[Path] = []
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._num_bytes = 0
        self._opened_unix_s = 0.0
        self._num_files = 0
        self._whole_bytes = 0
        """Where the last whole record ends in the current file (header included)."""

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole records) and flush it to the OS. On :class:`OSError`
        (disk full, directory gone) the file may hold part of ``data``: call
        :meth:`abandon`, then later writes start a new file."""
        now = self.wall_clock()
        if self._file is not None and (
            self._num_bytes >= self.config.rotate_bytes
            or now - self._opened_unix_s >= self.config.rotate_s
        ):
            self.close()
        if self._file is None:
            self._open(now)
        assert self._file is not None
        self._file.write(data)
        self._file.flush()
        self._num_bytes += len(data)
        self._whole_bytes = self._file.tell()

    def close(self) -> None:
        """Finish the current file (if any): close, rename into place. May raise
        :class:`OSError`; the next write starts a new file either way."""
        file, path = self._file, self._path
        if file is None or path is None:
            return
        self._file, self._path = None, None
        file.close()
        _part(path).rename(path)
        self.closed_paths.append(path)

    def abandon(self) -> None:
        """After a failed write: cut the current file back to its last whole record and
        finish it if the file system lets us; never raises."""
        file, path = self._file, self._path
        if file is None or path is None:
            return
        self._file, self._path = None, None
        with contextlib.suppress(OSError):
            file.close()  # flushing the failed bytes again may fail: they are cut below
        with contextlib.suppress(OSError):
            if not self._whole_bytes:  # not even the header made it: nothing to keep
                _part(path).unlink()
                return
            os.truncate(_part(path), self._whole_bytes)
            _part(path).rename(path)
            self.closed_paths.append(path)

    def _open(self, now_unix_s: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._num_files += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_unix_s))
        path = self.directory / f"{self.config.file_prefix}-{stamp}-{self._num_files:04d}.jsonl"
        file = _part(path).open("wb")
        self._file, self._path = file, path
        self._num_bytes, self._opened_unix_s, self._whole_bytes = 0, now_unix_s, 0
        file.write(
            header_line(self.config.block_size_tokens, self.key_id, source="kvroute serve capture")
        )


def _part(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def check_directory(directory: Path) -> None:
    """Create ``directory`` (and its parents) if missing and check that a file can be
    created in it. Raises :class:`OSError` whose ``strerror`` says what is wrong."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        for path in (directory, *directory.parents):
            if path.exists() and not path.is_dir():
                raise OSError(exc.errno, f"{path} exists and is not a directory") from None
        raise OSError(exc.errno, exc.strerror or str(exc)) from None
