"""Runs a script under both builds of a compiled group (``KVROUTE_NATIVE=0`` forces the
Python sources), each in its own interpreter, for tests that compare the two."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def outcomes(script: str, *args: str, compiled: bool) -> dict[str, object]:
    """The JSON object ``script`` prints, run with the compiled build or the sources."""
    env = {**os.environ, "KVROUTE_NATIVE": "1" if compiled else "0"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def assert_same(compiled: dict[str, object], python: dict[str, object]) -> None:
    """Both runs report which build ran (``compiled``) and otherwise the same values."""
    assert compiled.pop("compiled") is True
    assert python.pop("compiled") is False
    assert compiled.keys() == python.keys()
    for key, value in compiled.items():
        assert value == python[key], f"{key}: the compiled build differs"
