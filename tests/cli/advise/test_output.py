"""``advise --out DIR``: refused before any work when it cannot take the files; written
whole or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kvroute.cli.advise.output import check_out_dir, write_out_dir
from kvroute.errors import KvrouteError, UsageError


def test_a_file_a_non_empty_dir_and_a_missing_parent_are_refused(tmp_path: Path) -> None:
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        check_out_dir(afile, force=True)
    full = tmp_path / "full"
    full.mkdir()
    (full / "old.json").write_text("old")
    with pytest.raises(UsageError, match="is not empty") as info:
        check_out_dir(full, force=False)
    assert "--force" in (info.value.hint or "")
    check_out_dir(full, force=True)  # allowed with --force
    with pytest.raises(UsageError, match="does not exist") as info:
        check_out_dir(tmp_path / "no" / "out", force=False)
    assert "mkdir -p" in (info.value.hint or "")
    check_out_dir(tmp_path / "new", force=False)
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_the_files_appear_with_their_modes_and_replace_an_old_dir_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier run")
    write_out_dir(
        out, {"advice.json": b"{}", "launch.sh": b"#!/bin/sh\n"}, frozenset({"launch.sh"})
    )
    assert sorted(p.name for p in out.iterdir()) == ["advice.json", "launch.sh"]
    assert stat.S_IMODE((out / "launch.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "advice.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # nothing aside left behind


def test_a_failed_write_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.json").write_text("old")
    with pytest.raises(KvrouteError, match="could not write"):
        write_out_dir(out, {"a.json": b"1", "no/such/dir.txt": b"2"}, frozenset())
    assert [p.name for p in out.iterdir()] == ["old.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging left behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_parent_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="permission denied"):
        check_out_dir(locked / "out", force=False)
