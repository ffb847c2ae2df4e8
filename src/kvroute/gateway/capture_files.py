"""Capture files: kvroute trace JSONL in one directory, rotated by size and age."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

import orjson

from kvroute.trace.formats.native import HEADER_KEY, SCHEMA_VERSION
from kvroute.trace.hashing import DEFAULT_SEED, HASH_SCHEME

if TYPE_CHECKING:
    from kvroute.gateway.capture import CaptureConfig


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
        self.closed_paths: list[Path] = []
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._num_bytes = 0
        self._opened_unix_s = 0.0
        self._num_files = 0

    def write(self, line: bytes) -> None:
        now = self.wall_clock()
        if self._file is not None and (
            self._num_bytes >= self.config.rotate_bytes
            or now - self._opened_unix_s >= self.config.rotate_s
        ):
            self.close()
        if self._file is None:
            self._open(now)
        assert self._file is not None
        self._file.write(line)
        self._num_bytes += len(line)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Finish the current file (if any): flush, close, rename into place."""
        if self._file is None or self._path is None:
            return
        self._file.close()
        self._path.with_name(self._path.name + ".part").rename(self._path)
        self.closed_paths.append(self._path)
        self._file, self._path = None, None

    def _open(self, now_unix_s: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._num_files += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_unix_s))
        self._path = (
            self.directory / f"{self.config.file_prefix}-{stamp}-{self._num_files:04d}.jsonl"
        )
        self._file = self._path.with_name(self._path.name + ".part").open("wb")
        header = {
            HEADER_KEY: SCHEMA_VERSION,
            "block_size": self.config.block_size_tokens,
            "hash_scheme": HASH_SCHEME,
            "seed": DEFAULT_SEED,
            "source": "kvroute serve capture",
        }
        self._file.write(orjson.dumps(header) + b"\n")
        self._num_bytes, self._opened_unix_s = 0, now_unix_s
