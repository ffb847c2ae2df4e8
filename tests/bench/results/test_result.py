"""The result file: written and read back unchanged, refused with the file and field
when it is not one, and runs that measured nothing named in one line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvroute.bench.results.metrics import stat, summarize
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.bench.results.result import (
    SCHEMA,
    BenchResult,
    EndpointInfo,
    LoadInfo,
    Run,
    WorkloadInfo,
    load_result,
    result_bytes,
    unserved_line,
    unserved_runs,
    write_result,
)
from kvroute.errors import InputError


def record(index: int, *, ok: bool) -> RequestRecord:
    rec = RequestRecord(index=index, scheduled_s=index * 0.1, sent_s=index * 0.1 + 0.001)
    if ok:
        rec.first_byte_s, rec.first_token_s, rec.end_s = 0.2 + index, 0.25 + index, 0.5 + index
        rec.chunk_times_s = [0.25 + index, 0.35 + index, 0.45 + index]
        rec.prompt_tokens, rec.completion_tokens = 12, 3
        rec.usage_body = {"usage": {"prompt_tokens": 12}}
    else:
        rec.fail(ErrorKind.HTTP_5XX, "HTTP 503: loading", 0.3 + index)
    return rec


def result(records: list[RequestRecord]) -> BenchResult:
    run = Run(
        EndpointInfo("llama", "http://127.0.0.1:8080", "llamacpp", "m", "cold", [], 1, [0]),
        0,
        0,
        LoadInfo("closed", "concurrency=1", concurrency=1),
        1.0e9,
        summarize(records),
        records,
    )
    workload = WorkloadInfo(
        "rag", {"overlap": "0.6"}, 0, len(records), "t", stat([12.0]), stat([3.0]), 0, 0, 0.5
    )
    return BenchResult(SCHEMA, 1.0e9, "0", workload, {"seed": 0}, "sequential", [run], 2.0)


def test_a_result_reads_back_as_written_less_the_raw_engine_bodies(tmp_path: Path) -> None:
    original = result([record(0, ok=True), record(1, ok=False)])
    path = tmp_path / "r.json"
    write_result(original, path)
    back = load_result(path)
    assert back.runs[0].summary == original.runs[0].summary
    assert back.runs[0].requests[1].error_kind is ErrorKind.HTTP_5XX
    assert back.runs[0].requests[0].chunk_times_s == [0.25, 0.35, 0.45]
    assert back.runs[0].requests[0].usage_body is None  # read into the fields, not kept
    assert back.workload == original.workload and back.runs[0].endpoint.cpus == [0]


def test_a_file_that_is_not_a_result_is_refused_with_its_path_and_the_field(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b"{not json")
    with pytest.raises(InputError, match="cannot read a bench result") as exc:
        load_result(path)
    assert exc.value.path == str(path)
    path.write_bytes(orjson.dumps({"schema": "other/2"}))
    with pytest.raises(InputError, match=r"not a kvroute\.bench/1 result"):
        load_result(path)
    good = orjson.loads(result_bytes(result([record(0, ok=True)])))
    good["runs"][0]["requests"][0]["first_token_s"] = "soon"
    path.write_bytes(orjson.dumps(good))
    with pytest.raises(InputError, match=r"\.runs\[\]\.requests\[\]\.first_token_s"):
        load_result(path)


def test_a_run_that_served_nothing_is_named_with_its_first_fault() -> None:
    served = result([record(0, ok=True), record(1, ok=False)])
    assert unserved_runs(served) == []
    failed = result([record(0, ok=False), record(1, ok=False)])
    (run,) = unserved_runs(failed)
    assert run.summary.num_ok == 0 and run.requests[0].outcome is Outcome.ERROR
    assert unserved_line(run) == (
        "llama (http://127.0.0.1:8080) at concurrency=1: no request succeeded; "
        "http_5xx (2 of 2): HTTP 503: loading"
    )
