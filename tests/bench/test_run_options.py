"""What ``--endpoint`` takes, what it refuses with one clear line, and the compute
``kvroute engines up`` recorded for it; run options as results record them."""

from __future__ import annotations

import re

import pytest

from kvroute.bench.run_options import BenchEndpoint, RunOptions, with_recorded_compute
from kvroute.bench.schedule import CancelSpec, ClosedLoop
from kvroute.engines.state import EngineRecord
from kvroute.errors import UsageError


def test_endpoint_parsing() -> None:
    assert BenchEndpoint.parse("v=http://127.0.0.1:8000/v1,engine=vllm,model=m") == BenchEndpoint(
        "v", "http://127.0.0.1:8000/v1", "vllm", "m"
    )
    assert BenchEndpoint.parse("s=https://example.org/v1,key=k,threads=4").threads == 4
    for bad, says in (
        ("http://x", "bad endpoint"),
        ("a=ftp://x", "http(s)://host"),
        ("a=http://x:port", "bad port"),
        ("a=http://x:1,colour=red", "bad endpoint option"),
        ("a=http://x:1,threads=0", "threads"),
    ):
        with pytest.raises(UsageError, match=re.escape(says)):
            BenchEndpoint.parse(bad)


def test_an_endpoint_takes_the_threads_engines_up_recorded_unless_given() -> None:
    rec = EngineRecord(
        "llamacpp", 8080, "http://127.0.0.1:8080", "m", 1, 1, 0.0, "/l", (), threads=2, cpus=(0, 1)
    )
    got = with_recorded_compute(BenchEndpoint.parse("a=http://127.0.0.1:8080/v1"), [rec])
    assert (got.threads, got.cpus) == (2, (0, 1))
    given = with_recorded_compute(BenchEndpoint.parse("a=http://127.0.0.1:8080,threads=1"), [rec])
    assert given.threads == 1
    other = with_recorded_compute(BenchEndpoint.parse("a=http://127.0.0.1:9999"), [rec])
    assert (other.threads, other.cpus) == (None, ())


def test_run_options_are_described_as_the_result_records_them() -> None:
    options = RunOptions(loads=(ClosedLoop(2),), cancel=CancelSpec(0.5, 2, 3), seed=7)
    described = options.describe()
    assert described["cancel"] == {"share": 0.5, "after_min": 2, "after_max": 3}
    assert (described["seed"], described["slo"], described["cache"]) == (7, None, "cold")
