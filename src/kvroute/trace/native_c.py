"""kvroute.trace's two small C modules, and when they are used.

The gateway tokenizes and hashes one request's prompt at a time, where Python's (and
numpy's) per-call costs are most of the work. Two hot loops are also written in C,
beside the Python that defines them:

- ``chainhash.c``: one prompt's chained block hashes (:func:`kvroute.trace.hashing.block_hashes`);
- ``asciiwords.c``: the chunk memo of
  :class:`~kvroute.trace.pretokenize.AsciiWordEncoder`.

``scripts/build-native`` compiles both into ``_native/`` with a stamp of their sources.
:func:`load` returns a module only while that stamp matches the ``.c`` files on disk
and ``KVROUTE_NATIVE`` is not ``0``; otherwise the callers run their Python, so a
missing or stale build is slower, never wrong. The tests run both on the same inputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent
MODULES = ("chainhash", "asciiwords")
SOURCES = tuple(HERE / f"{name}.c" for name in MODULES)
NATIVE_DIR = HERE / "_native"
STAMP = "stamp.json"


def source_digest() -> str:
    """A digest of the C sources and the interpreter they are built for."""
    h = hashlib.sha256(sys.implementation.cache_tag.encode())
    for source in SOURCES:
        h.update(source.name.encode())
        h.update(source.read_bytes())
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
        return False, "stale: the C sources changed since the build (run scripts/build-native)"
    return True, "compiled (C)"


def load(name: str) -> ModuleType | None:
    """The compiled module ``name`` (one of :data:`MODULES`), or None when the build is
    missing, stale or disabled."""
    if not status()[0]:
        return None
    built = sorted(NATIVE_DIR.glob(f"{name}.*.so"))
    if not built:
        return None
    spec = importlib.util.spec_from_file_location(f"kvroute.trace._native.{name}", built[0])
    if spec is None or spec.loader is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module
