"""Compiled code: the one module that knows about it.

Three groups of modules have compiled copies, built by ``scripts/build-native`` into a
``_native/`` folder beside their package, each with a stamp of the sources it was built
from:

- ``cache``: the cache models and their replay (mypyc);
- ``gateway``: prompt tokenizing, capture's records and the live traffic window (mypyc);
- ``trace``: two C modules, ``chainhash`` (one prompt's block hashes,
  :mod:`kvroute.trace.hashing`) and ``asciiwords`` (:mod:`kvroute.trace.pretokenize`),
  which have no Python module of their name: their callers fall back to numpy and Python.

**Nothing happens at import.** A program that wants the compiled copies calls
:func:`enable` once, first thing, before it imports what it will run (``kvroute`` the
command does, in ``kvroute/__main__.py``; the test suite does, in ``tests/conftest.py``).
:func:`enable` checks each group's stamp against the sources on disk and, for each group
that is current, puts one finder on :data:`sys.meta_path` that answers the group's module
names with their compiled files; every other import goes on as usual. Why this and not
the package ``__init__`` rewriting its ``__path__`` (what kvroute did before): importing a
package then read and hashed its sources and changed how its submodules resolve, for
every importer, whether it wanted speed or not; here a library import is plain Python
and predictable, and the one who runs the program decides, once, at its edge (as one
picks uvloop). The stamp check keeps an edited module from ever running as a stale
compiled copy: the whole group stays on the sources until the next build (a group's
mypyc modules share one library, and a compiled module refuses instances of an
uncompiled copy of a class it was built with: all compiled or none). For the same reason
a group is left out when one of its modules was imported before :func:`enable`.

``KVROUTE_NATIVE=0`` in the environment makes :func:`enable` a no-op.

Install time: ``pip install kvroute`` builds nothing (a plain setuptools build of the
sources); ``scripts/build-native`` is the build. Building mypyc groups in a wheel build
would need mypy and a C compiler at install time and minutes of compiling, and a failed
compile would fail the install; the product is correct without the build, only slower
(replay and capture), and the command says so where it matters (``kvroute simulate``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

PACKAGE_ROOT = Path(__file__).resolve().parent
"""``src/kvroute``: stamps name files relative to it."""
STAMP = "stamp.json"


@dataclass(frozen=True)
class Group:
    """One package's compiled modules: which, where, and built from what."""

    package: str
    """The package under ``kvroute`` (``cache``, ``gateway``, ``trace``)."""
    modules: tuple[str, ...]
    """Its modules that the build compiles, dotted below the package."""
    depends: tuple[str, ...]
    """Files under ``src/kvroute`` outside :attr:`modules` that the compiled code was built
    against (the modules it imports): part of the stamp."""
    kind: str
    """``mypyc`` (Python sources compiled) or ``c`` (``<module>.c`` beside the package)."""
    whole_package: bool = False
    """The stamp covers every ``.py`` file of the package and its subpackages, not only
    :attr:`modules`."""
    importers: tuple[str, ...] = ()
    """Modules that look the compiled ones up when they are imported (a C group's
    callers): imported before :func:`enable`, they have settled on the fallback."""

    @property
    def native_dir(self) -> Path:
        return PACKAGE_ROOT / self.package / "_native"

    @property
    def library(self) -> str:
        """mypyc's shared library of the group (``<library>__mypyc``, also in ``_native/``)."""
        return f"kvroute.{self.package}.native_lib"

    def sources(self) -> list[Path]:
        """The files the build is made from, in stamp order."""
        folder = PACKAGE_ROOT / self.package
        if self.kind == "c":
            own = [folder / f"{name}.c" for name in self.modules]
        elif self.whole_package:
            own = sorted(folder.rglob("*.py"))
        else:
            own = [folder / f"{name.replace('.', '/')}.py" for name in self.modules]
        return own + [PACKAGE_ROOT / p for p in self.depends]

    def source_digest(self) -> str:
        """A digest of :meth:`sources` and of the interpreter they are built for."""
        h = hashlib.sha256(sys.implementation.cache_tag.encode())
        for path in self.sources():
            h.update(str(path.relative_to(PACKAGE_ROOT)).encode())
            h.update(path.read_bytes())
        return h.hexdigest()

    def status(self) -> tuple[bool, str]:
        """Whether the build is usable (built, current, not disabled), and why not."""
        if os.environ.get("KVROUTE_NATIVE", "1") == "0":
            return False, "disabled by KVROUTE_NATIVE=0"
        try:
            stamp = json.loads((self.native_dir / STAMP).read_text())
        except (OSError, ValueError):
            return False, "not built (run scripts/build-native)"
        if not isinstance(stamp, dict) or stamp.get("digest") != self.source_digest():
            return False, "stale: the sources changed since the build (run scripts/build-native)"
        return True, "compiled (C)" if self.kind == "c" else "compiled (mypyc)"

    def compiled_file(self, fullname: str) -> Path | None:
        """The built file of module ``fullname`` of this group, if there is one."""
        prefix = f"kvroute.{self.package}."
        if not fullname.startswith(prefix):
            return None
        base = self.native_dir / fullname[len(prefix) :].replace(".", "/")
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = base.with_name(base.name + suffix)
            if path.is_file():
                return path
        return None

    def module_names(self) -> list[str]:
        names = [f"kvroute.{self.package}.{m}" for m in self.modules]
        return names + ([f"{self.library}__mypyc"] if self.kind == "mypyc" else [])


CACHE = Group(
    "cache",
    (
        "base",
        "replay.loop",
        "replay.seq",
        "models.vllm",
        "models.sglang",
        "models.radix",
        "models.llamacpp",
        "models.prompt_cache",
        "models.chunk_reuse",
    ),
    ("types.py", "errors.py", "trace/hashing.py", "trace/records.py"),
    "mypyc",
    whole_package=True,
)
GATEWAY = Group(
    "gateway",
    (
        "prompts.tokens",
        "prompts.chat_pieces",
        "capture.records",
        "capture.bodies",
        "capture.attrs",
        "capture.hashes",
        "traffic.shape",
        "traffic.window_index",
    ),
    (
        "types.py",
        "errors.py",
        "analyze/result.py",
        "gateway/types.py",
        "gateway/config/traffic.py",
        "gateway/capture/__init__.py",
        "gateway/prompts/__init__.py",
        "gateway/traffic/__init__.py",
        "trace/tokenizer.py",
        "trace/pretokenize.py",
        "trace/hashing.py",
        "trace/records.py",
        "trace/writer.py",
        "trace/formats/base.py",
        "trace/formats/kvroute.py",
        "trace/formats/openai_log.py",
    ),
    "mypyc",
)
TRACE_C = Group(
    "trace",
    ("chainhash", "asciiwords"),
    (),
    "c",
    importers=("kvroute.trace.hashing", "kvroute.trace.pretokenize"),
)
GROUPS = (CACHE, GATEWAY, TRACE_C)
BY_NAME = {g.package: g for g in GROUPS}


class _Finder(importlib.abc.MetaPathFinder):
    """Answers the enabled groups' module names with their compiled files."""

    def __init__(self) -> None:
        self.groups: list[Group] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        for group in self.groups:
            found = group.compiled_file(fullname)
            if found is not None:
                return importlib.util.spec_from_file_location(fullname, found)
        return None


def _finder() -> _Finder | None:
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            return finder
    return None


def enable() -> dict[str, str]:
    """Use the compiled copies of every group whose build is current, for the imports
    that follow; idempotent. Returns each group's state (``status()``'s reason, or why
    it was left out)."""
    finder = _finder()
    if finder is None:
        finder = _Finder()
        sys.meta_path.insert(0, finder)
    out: dict[str, str] = {}
    for group in GROUPS:
        usable, why = group.status()
        if group in finder.groups:
            out[group.package] = why
            continue
        early = [n for n in (*group.module_names(), *group.importers) if n in sys.modules]
        if usable and early:
            usable, why = False, f"not used: {early[0]} was imported before _accel.enable()"
        if usable:
            finder.groups.append(group)
        out[group.package] = why
    return out


def status(package: str) -> tuple[bool, str]:
    """Whether group ``package`` (``cache``, ``gateway``, ``trace``) runs compiled in this
    process once imported, and why not."""
    group = BY_NAME[package]
    usable, why = group.status()
    finder = _finder()
    if usable and (finder is None or group not in finder.groups):
        return False, "built, but not enabled (kvroute._accel.enable() was not called first)"
    return usable, why


def active(package: str) -> bool:
    """Whether this process runs group ``package``'s compiled copies: its first module,
    imported, is an extension module."""
    group = BY_NAME[package]
    if group.kind == "c":
        return optional(group.module_names()[0]) is not None
    module = importlib.import_module(group.module_names()[0])
    return not str(getattr(module, "__file__", "")).endswith(".py")


def optional(name: str) -> ModuleType | None:
    """Module ``name`` when it can be imported (a C module with no Python of its name:
    only when its group is enabled), else None."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
