"""Engine records on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvroute.engines.state import EngineRecord, StateDir, default_state_dir
from kvroute.errors import EngineError


def _record(engine: str = "llamacpp", port: int = 8080) -> EngineRecord:
    return EngineRecord(
        engine=engine,
        port=port,
        base_url=f"http://127.0.0.1:{port}",
        model_name="SmolLM2-135M-Instruct",
        pid=1234,
        start_ticks=99,
        started_at_unix_s=1.5,
        log_path=f"/tmp/{engine}-{port}.log",
        argv=("llama-server", "--port", str(port)),
    )


def test_round_trip_order_and_remove(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert state.records() == []
    records = [_record("vllm", 9000), _record("llamacpp", 8081), _record("llamacpp", 8080)]
    for record in records:
        state.add(record)
    assert state.records() == sorted(records, key=lambda r: (r.engine, r.port))
    state.remove(records[1])
    state.remove(records[1])  # removing twice is fine
    assert [r.name for r in state.records()] == ["llamacpp-8080", "vllm-9000"]
    assert state.records()[0].process.start_ticks == 99


def test_paths_are_per_engine_and_port(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert state.log_path("vllm", 9000) == tmp_path / "logs" / "vllm-9000.log"
    assert state.run_dir("vllm", 9000) == tmp_path / "run" / "vllm-9000"


def test_malformed_record_names_the_file(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.add(_record())
    bad = tmp_path / "engines" / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(EngineError, match=r"broken\.json"):
        state.records()
    bad.write_text('{"engine": "llamacpp"}')
    with pytest.raises(EngineError, match="malformed"):
        state.records()


def test_default_state_dir() -> None:
    assert default_state_dir({"KVROUTE_STATE_DIR": "/x/y"}) == Path("/x/y")
    assert default_state_dir({"KVROUTE_CACHE": "/c"}) == Path("/c/state")


def test_threads_and_cpus_round_trip_and_older_records_still_read(tmp_path: Path) -> None:
    from dataclasses import replace

    state = StateDir(tmp_path)
    rec = replace(_record(), threads=1, cpus=(0,))
    state.add(rec)
    assert state.records() == [rec]
    old = rec.to_json()
    del old["threads"], old["cpus"]
    again = EngineRecord.from_json(old)
    assert again.threads is None and again.cpus == ()
