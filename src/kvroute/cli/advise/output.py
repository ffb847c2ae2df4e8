"""``kvroute advise --out DIR``: every file made in memory, checked, then DIR appears whole.

The files are written into a fresh sibling directory, which then takes DIR's place by
rename: a failure anywhere (a bad input, a full disk) leaves DIR as it was, never half
written. A DIR that exists and holds files is refused unless ``--force``; with it, the
old DIR is moved aside, the new one renamed in, and the old one removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kvroute.errors import KvrouteError, UsageError

EXECUTABLE = 0o755


def check_out_dir(out: Path, *, force: bool) -> None:
    """Refuse, before any work, an ``--out`` that cannot take the files."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory", hint="give a directory path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(
            f"--out {out} is not empty",
            hint="give a new or empty directory, or --force to replace its contents",
        )
    parent = out.resolve().parent
    if not parent.is_dir():
        raise UsageError(
            f"--out {out}: directory {parent} does not exist", hint=f"create it (mkdir -p {parent})"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot create files in {parent} (permission denied)")


def write_out_dir(out: Path, files: Mapping[str, bytes], executable: frozenset[str]) -> None:
    """Write ``files`` (name -> content) as the whole of ``out`` (see the module doc)."""
    target = out.resolve()
    try:
        staging = Path(
            tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        )
    except OSError as exc:
        raise KvrouteError(f"could not write {out}: {exc.strerror or exc}") from None
    try:
        for name, data in files.items():
            path = staging / name
            path.write_bytes(data)
            mode = EXECUTABLE if name in executable else 0o644
            os.chmod(path, mode)
        os.chmod(staging, 0o755)
        _swap_in(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise KvrouteError(
            f"could not write {out}: {exc.strerror or exc}",
            hint="check the disk has room and the path is writable",
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_in(staging: Path, target: Path) -> None:
    if not target.exists():
        os.rename(staging, target)
        return
    if not stat.S_ISDIR(os.lstat(target).st_mode):
        raise OSError(f"{target} is not a directory")
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    os.rmdir(aside)
    os.rename(target, aside)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(aside, target)
        raise
    with contextlib.suppress(OSError):
        shutil.rmtree(aside)
