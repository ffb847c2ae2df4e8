"""The compiled build of prompt tokenizing's, capture's and the live traffic window's
hot modules (:mod:`kvroute.native_group`).

Used when the build (``scripts/build-native``) is current, else the Python sources
(``KVROUTE_NATIVE=0`` forces them). Both builds give identical records and token ids
(``tests/gateway/test_native.py``); the compiled one renders a new capture record and
tokenizes a routed prompt in about 2/3 of the time (``bench/RESULTS.md``).
``trace/pretokenize.py`` is not in the group: its package loads only sources, and a
compiled module refuses instances of the uncompiled copy of a class it was built with.
"""

from __future__ import annotations

from kvroute.native_group import NativeGroup, kvroute_files, package_files

COMPILED = (
    "prompts.tokens",
    "prompts.chat_pieces",
    "capture.records",
    "capture.bodies",
    "capture.attrs",
    "capture.hashes",
    "traffic.shape",
    "traffic.window_index",
)
"""Modules of ``kvroute.gateway`` that the native build compiles (dotted below it: each
subpackage's ``__init__`` puts its ``_native/<subpackage>/`` first on its path)."""

_DEPENDS = (
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
)
"""Modules outside the group that the compiled ones import: part of the stamp."""

BUILD = NativeGroup(
    "gateway",
    COMPILED,
    lambda: package_files("gateway", COMPILED) + kvroute_files(_DEPENDS),
    probe="capture.records",
)
status = BUILD.status
search_path = BUILD.search_path
active = BUILD.active
