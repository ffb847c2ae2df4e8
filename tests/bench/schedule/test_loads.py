"""Loads and sweeps: parsed and validated, with one clear error for each bad value."""

from __future__ import annotations

import pytest

from kvroute.bench.schedule import CancelSpec, ClosedLoop, OpenLoop, parse_sweep
from kvroute.errors import UsageError


def test_parse_sweep_and_bad_loads() -> None:
    assert parse_sweep("5") == [5.0]
    assert parse_sweep("1,2,4") == [1.0, 2.0, 4.0]
    assert parse_sweep("1:16:x2") == [1, 2, 4, 8, 16]
    assert parse_sweep("10:30:+10") == [10, 20, 30]
    for bad in ("", "a,b", "1:8:x1", "0,1", "1:2"):
        with pytest.raises(UsageError):
            parse_sweep(bad)
    with pytest.raises(UsageError):
        OpenLoop(0)
    with pytest.raises(UsageError):
        ClosedLoop(0)
    with pytest.raises(UsageError):
        CancelSpec(1.5)


def test_labels_name_the_load() -> None:
    assert OpenLoop(2.5).label == "rate=2.5/s"
    assert ClosedLoop(4, think_s=1.0).label == "concurrency=4"
