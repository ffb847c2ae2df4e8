"""The compiled build of the replay's hot modules (:mod:`kvroute.native_group`).

The cache models and their replay, compiled by ``scripts/build-native``; used when the
build is current, else the Python sources (``KVROUTE_NATIVE=0`` forces them). The two
builds give identical results (``tests/cache/test_native.py`` replays the same traces
through both); the compiled one is faster (``bench/simulate_bench.py`` reports which
one it timed).
"""

from __future__ import annotations

from kvroute.native_group import NativeGroup, kvroute_files, package_files

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

_DEPENDS = ("types.py", "errors.py", "trace/hashing.py", "trace/records.py")
"""Modules outside ``kvroute.cache`` that the compiled ones import: part of the stamp."""

BUILD = NativeGroup(
    "cache", COMPILED, lambda: package_files("cache") + kvroute_files(_DEPENDS), probe="replay"
)
status = BUILD.status
search_path = BUILD.search_path
active = BUILD.active
