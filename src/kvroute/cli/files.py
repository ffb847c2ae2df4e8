"""Small file and argument helpers shared by the CLI commands."""

from __future__ import annotations

import os
from pathlib import Path

from kvroute.errors import UsageError


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so an existing
    file is replaced only by a complete one."""
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def parse_pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    """``("a=1", "b=x")`` as ``{"a": "1", "b": "x"}``; ``what`` names the option in errors."""
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad {what} {v!r}", hint=f"use {what} name=value")
        out[key.strip()] = value.strip()
    return out
