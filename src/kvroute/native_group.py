"""A group of modules compiled with mypyc, and when the compiled copies are used.

``scripts/build-native`` compiles a package's hot modules with mypyc (the compiler mypy
ships; the sources stay plain, type-checked Python) into ``_native/`` beside them, with
a stamp of the sources it was built from. When the package is imported,
:meth:`NativeGroup.search_path` puts ``_native/`` ahead of the sources on the package's
``__path__`` only if the stamp still matches the files on disk, so an edited module
never runs as a stale compiled copy: the whole group falls back to the Python sources
until the next build (a group's modules share one library: all compiled or none).

Two groups: :mod:`kvroute.cache.native` (the cache models and their replay) and
:mod:`kvroute.gateway.native` (prompt tokenizing and capture records).
``KVROUTE_NATIVE=0`` in the environment forces the Python sources of both.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

STAMP = "stamp.json"
PACKAGE_ROOT = Path(__file__).resolve().parent
"""``src/kvroute``: the stamp names files relative to it."""


class NativeGroup:
    """One package's compiled modules: where they are built, from what, and whether
    the build is current."""

    def __init__(
        self,
        package: str,
        compiled: Sequence[str],
        sources: Callable[[], list[Path]],
        probe: str,
    ) -> None:
        self.package = package
        """The package under ``kvroute`` (``cache``, ``gateway``)."""
        self.compiled = tuple(compiled)
        """Its modules that the build compiles."""
        self.group = f"kvroute.{package}.native_lib"
        """mypyc's shared library for the group (``native_lib__mypyc``), also in ``_native/``."""
        self.native_dir = PACKAGE_ROOT / package / "_native"
        self._sources = sources
        self._probe = f"kvroute.{package}.{probe}"

    def source_digest(self) -> str:
        """A digest of every source the compiled modules are built from (the group's
        own and every kvroute module they import), and of the interpreter."""
        h = hashlib.sha256(sys.implementation.cache_tag.encode())
        for path in self._sources():
            h.update(str(path.relative_to(PACKAGE_ROOT)).encode())
            h.update(path.read_bytes())
        return h.hexdigest()

    def status(self) -> tuple[bool, str]:
        """Whether the compiled modules are usable, and why not when they are not."""
        if os.environ.get("KVROUTE_NATIVE", "1") == "0":
            return False, "disabled by KVROUTE_NATIVE=0"
        try:
            stamp = json.loads((self.native_dir / STAMP).read_text())
        except (OSError, ValueError):
            return False, "not built (run scripts/build-native)"
        if not isinstance(stamp, dict) or stamp.get("digest") != self.source_digest():
            return False, "stale: the sources changed since the build (run scripts/build-native)"
        return True, "compiled (mypyc)"

    def search_path(self, path: list[str], subpackage: str = "") -> list[str]:
        """The package's (or its ``subpackage``'s) ``__path__``, with ``_native/`` (or
        ``_native/<subpackage>/``) first when it is current."""
        usable, _ = self.status()
        return [str(self.native_dir / subpackage), *path] if usable else path

    def active(self) -> bool:
        """Whether the running process uses the compiled modules (the probe module is
        an extension module, not a ``.py`` file)."""
        module = sys.modules.get(self._probe) or importlib.import_module(self._probe)
        return not str(getattr(module, "__file__", "")).endswith(".py")


def package_files(package: str, names: Sequence[str] | None = None) -> list[Path]:
    """A package's modules (all of them, or ``names``, dotted below the package), as the
    stamp reads them."""
    folder = PACKAGE_ROOT / package
    if names is None:
        return sorted(folder.glob("*.py"))
    return [folder / f"{name.replace('.', '/')}.py" for name in names]


def kvroute_files(relative: Sequence[str]) -> list[Path]:
    """Files under ``src/kvroute`` by relative path."""
    return [PACKAGE_ROOT / p for p in relative]
