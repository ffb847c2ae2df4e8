"""Compiled code is used only when a program asks for it (:func:`kvroute._accel.enable`),
only while its build matches the sources, never with ``KVROUTE_NATIVE=0``, and importing
a package does nothing to find it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvroute import _accel
from kvroute._accel import CACHE, GATEWAY, PACKAGE_ROOT, STAMP, TRACE_C, Group

GROUPS = pytest.mark.parametrize("group", [CACHE, GATEWAY, TRACE_C], ids=["cache", "gateway", "c"])


def _moved(group: Group, folder: Path) -> Group:
    """``group`` with its build folder at ``folder``."""

    class Moved(Group):
        @property
        def native_dir(self) -> Path:
            return folder

    return Moved(group.package, group.modules, group.depends, group.kind, group.whole_package)


@GROUPS
def test_a_missing_or_stale_build_is_not_used(
    group: Group, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KVROUTE_NATIVE", raising=False)
    moved = _moved(group, tmp_path)
    assert moved.status() == (False, "not built (run scripts/build-native)")
    (tmp_path / STAMP).write_text(json.dumps({"digest": "built from older sources"}))
    assert moved.status() == (
        False,
        "stale: the sources changed since the build (run scripts/build-native)",
    )
    (tmp_path / STAMP).write_text(json.dumps({"digest": moved.source_digest()}))
    assert moved.status()[0]
    assert moved.compiled_file(moved.module_names()[0]) is None  # stamped, nothing built
    monkeypatch.setenv("KVROUTE_NATIVE", "0")
    assert moved.status() == (False, "disabled by KVROUTE_NATIVE=0")


@GROUPS
def test_the_stamp_covers_every_compiled_module(group: Group) -> None:
    """An edit to any compiled module (or the modules it imports) must make the build stale."""
    stamped = {p.relative_to(PACKAGE_ROOT).as_posix() for p in group.sources()}
    suffix = ".c" if group.kind == "c" else ".py"
    for name in group.modules:
        assert f"{group.package}/{name.replace('.', '/')}{suffix}" in stamped
    assert all((PACKAGE_ROOT / p).is_file() for p in stamped)
    if group.whole_package:  # its subpackages too (cache's models/, replay/)
        every = (PACKAGE_ROOT / group.package).rglob("*.py")
        assert {p.relative_to(PACKAGE_ROOT).as_posix() for p in every} <= stamped


def _run(code: str, **env: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


PROBE = """
import json, sys
{before}
import kvroute.cache, kvroute.gateway, kvroute.gateway.capture
import kvroute.cache.replay.loop as replay, kvroute.gateway.capture.records as records
from kvroute.trace import hashing
print(json.dumps({{
    "paths": [list(kvroute.cache.__path__), list(kvroute.gateway.capture.__path__)],
    "replay": replay.__file__, "records": records.__file__, "c": hashing.active(),
    "finders": sum(type(f).__name__ == "_Finder" for f in sys.meta_path),
}}))
"""


def test_importing_kvroute_does_nothing_to_find_compiled_code() -> None:
    """Without enable(), every module is the Python source, and no package __init__
    changes where its submodules come from."""
    out = _run(PROBE.format(before=""), KVROUTE_NATIVE="1")
    assert out["paths"] == [
        [str(PACKAGE_ROOT / "cache")],
        [str(PACKAGE_ROOT / "gateway" / "capture")],
    ]
    assert str(out["replay"]).endswith(".py") and str(out["records"]).endswith(".py")
    assert out["c"] is False and out["finders"] == 0


def test_kvroute_native_0_makes_enable_a_no_op() -> None:
    before = "from kvroute import _accel; _accel.enable()"
    out = _run(PROBE.format(before=before), KVROUTE_NATIVE="0")
    assert str(out["replay"]).endswith(".py") and str(out["records"]).endswith(".py")
    assert out["c"] is False


@pytest.mark.skipif(
    not all(g.status()[0] for g in (CACHE, GATEWAY, TRACE_C)),
    reason="compiled build not current (scripts/build-native)",
)
def test_enable_uses_every_current_build() -> None:
    before = "from kvroute import _accel; _accel.enable(); _accel.enable()"
    out = _run(PROBE.format(before=before), KVROUTE_NATIVE="1")
    assert str(out["replay"]).endswith(".so") and str(out["records"]).endswith(".so")
    assert out["c"] is True and out["finders"] == 1  # enable() twice: one finder


@pytest.mark.skipif(not CACHE.status()[0], reason="compiled build not current")
def test_a_group_imported_before_enable_stays_on_its_sources() -> None:
    """All of a group compiled or none: a module imported as Python first keeps the
    whole group on the sources, and enable() says why."""
    code = (
        "import json; import kvroute.cache.base; from kvroute import _accel\n"
        "states = _accel.enable(); import kvroute.cache.replay.loop as r\n"
        "print(json.dumps({'why': states['cache'], 'replay': r.__file__,"
        " 'status': _accel.status('cache')}))"
    )
    out = _run(code, KVROUTE_NATIVE="1")
    assert out["why"] == "not used: kvroute.cache.base was imported before _accel.enable()"
    assert str(out["replay"]).endswith(".py")
    assert out["status"] == [
        False,
        "built, but not enabled (kvroute._accel.enable() was not called first)",
    ]


def test_this_process_enabled_what_is_current() -> None:
    """The suite runs as the command does (tests/conftest.py enables)."""
    for package in ("cache", "gateway", "trace"):
        usable, _ = _accel.BY_NAME[package].status()
        assert _accel.status(package)[0] == usable
        assert _accel.active(package) == usable
