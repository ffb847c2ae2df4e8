"""The compiled build of the replay's hot modules, and when it is used.

``scripts/build-native`` compiles the modules in :data:`COMPILED` with mypyc (the
compiler mypy ships; the sources stay plain, type-checked Python) into ``_native/``
beside this file, with a stamp of the sources it was built from. When the package
``kvroute.cache`` is imported, :func:`search_path` puts ``_native/`` ahead of the
sources on the package's ``__path__`` only if the stamp still matches the sources on
disk, so an edited module never runs as a stale compiled copy: it falls back to the
Python source until the next build. The two builds give identical results
(``tests/cache/test_native.py`` replays the same traces through both); the compiled one
is faster (``bench/simulate_bench.py`` reports which one it timed).

``KVROUTE_NATIVE=0`` in the environment forces the Python sources.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

COMPILED = (
    "base",
    "replay",
    "seq",
    "vllm",
    "sglang",
    "radix",
    "llamacpp",
    "prompt_cache",
    "chunk_reuse",
)
"""Modules of ``kvroute.cache`` that the native build compiles."""

GROUP = "kvroute.cache.native_lib"
"""mypyc's shared library for the group (``native_lib__mypyc``), also in ``_native/``."""

NATIVE_DIR = Path(__file__).with_name("_native")
STAMP = "stamp.json"

_PACKAGE = Path(__file__).resolve().parents[1]
_DEPENDS = ("types.py", "errors.py", "trace/hashing.py", "trace/records.py")
"""Modules outside ``kvroute.cache`` that the compiled ones import: part of the stamp."""


def source_digest() -> str:
    """A digest of every source the compiled modules were built from, and the interpreter."""
    h = hashlib.sha256(sys.implementation.cache_tag.encode())
    files = sorted((_PACKAGE / "cache").glob("*.py")) + [_PACKAGE / p for p in _DEPENDS]
    for path in files:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def status() -> tuple[bool, str]:
    """Whether the compiled modules are usable, and why not when they are not."""
    if os.environ.get("KVROUTE_NATIVE", "1") == "0":
        return False, "disabled by KVROUTE_NATIVE=0"
    try:
        stamp = json.loads((NATIVE_DIR / STAMP).read_text())
    except (OSError, ValueError):
        return False, "not built (run scripts/build-native)"
    if not isinstance(stamp, dict) or stamp.get("digest") != source_digest():
        return False, "stale: the sources changed since the build (run scripts/build-native)"
    return True, "compiled (mypyc)"


def search_path(path: list[str]) -> list[str]:
    """``kvroute.cache``'s ``__path__``, with ``_native/`` first when it is current."""
    usable, _ = status()
    return [str(NATIVE_DIR), *path] if usable else path


def active() -> bool:
    """Whether the running process replays with the compiled modules."""
    replay = sys.modules.get("kvroute.cache.replay")
    if replay is None:
        from kvroute.cache import replay
    return not str(getattr(replay, "__file__", "")).endswith(".py")
