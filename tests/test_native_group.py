"""A compiled group is used only while its build matches the sources, and never with
``KVROUTE_NATIVE=0`` (both groups: the cache models', and prompt tokenizing's and
capture's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvroute.cache.native import BUILD as CACHE
from kvroute.gateway.native import BUILD as GATEWAY
from kvroute.native_group import PACKAGE_ROOT, STAMP, NativeGroup

GROUPS = pytest.mark.parametrize("group", [CACHE, GATEWAY], ids=["cache", "gateway"])


@GROUPS
def test_a_stale_build_is_not_used(
    group: NativeGroup, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KVROUTE_NATIVE", raising=False)
    monkeypatch.setattr(group, "native_dir", tmp_path)
    assert group.status() == (False, "not built (run scripts/build-native)")
    (tmp_path / STAMP).write_text(json.dumps({"digest": "built from older sources"}))
    assert group.status() == (
        False,
        "stale: the sources changed since the build (run scripts/build-native)",
    )
    assert group.search_path(["src"]) == ["src"]
    (tmp_path / STAMP).write_text(json.dumps({"digest": group.source_digest()}))
    assert group.status()[0]
    assert group.search_path(["src"]) == [str(tmp_path), "src"]


@GROUPS
def test_kvroute_native_0_forces_the_sources(
    group: NativeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVROUTE_NATIVE", "0")
    assert group.status() == (False, "disabled by KVROUTE_NATIVE=0")
    assert group.search_path(["src"]) == ["src"]


@GROUPS
def test_the_stamp_covers_every_compiled_module(group: NativeGroup) -> None:
    """An edit to any compiled module (or the modules it imports) must make the build stale."""
    stamped = {p.relative_to(PACKAGE_ROOT).as_posix() for p in group._sources()}
    for name in group.compiled:
        assert f"{group.package}/{name.replace('.', '/')}.py" in stamped
