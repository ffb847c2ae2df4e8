"""`kvroute engines up|status|logs|down` (src/kvroute/cli/engines.py) with real llama-servers.

Lives here rather than in tests/cli/ to keep the engine tests together.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kvroute.cli.engines import engines_group
from kvroute.engines.process import group_members, identify
from kvroute.engines.state import StateDir
from kvroute.errors import UsageError


@pytest.mark.engine
@pytest.mark.llamacpp
def test_up_status_logs_down(tmp_path: Path) -> None:
    runner = CliRunner()
    state = ["--state-dir", str(tmp_path)]
    up = runner.invoke(
        engines_group,
        [
            "up",
            "--engine",
            "llamacpp",
            "--replicas",
            "2",
            "--parallel",
            "1",
            "--ctx",
            "512",
            *state,
        ],
    )
    assert up.exit_code == 0, up.output
    records = StateDir(tmp_path).records()
    try:
        assert len(records) == 2
        for record in records:
            assert record.base_url in up.stdout
        snippet = up.stdout[up.stdout.index("backends:") :]
        backends = yaml.safe_load(snippet)["backends"]
        assert sorted(b["url"] for b in backends) == sorted(r.base_url for r in records)
        assert {b["engine"] for b in backends} == {"llamacpp"}

        status = runner.invoke(engines_group, ["status", *state])
        assert status.exit_code == 0, status.output
        assert status.stdout.count("ready") == 2

        logs = runner.invoke(
            engines_group, ["logs", "--port", str(records[0].port), "-n", "200", *state]
        )
        assert logs.exit_code == 0, logs.output
        assert f"listening on {records[0].base_url}" in logs.stdout
        assert records[1].base_url not in logs.stdout
    finally:
        down = runner.invoke(engines_group, ["down", *state])
    assert down.exit_code == 0, down.output
    assert down.stdout.count("stopped") == 2
    assert all(identify(r.pid) is None and group_members(r.pid) == [] for r in records)
    after = runner.invoke(engines_group, ["status", *state])
    assert "no engines recorded" in after.stdout


def test_unknown_engine_is_a_usage_error_naming_the_valid_ones(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        engines_group, ["up", "--engine", "tgi", "--state-dir", str(tmp_path)]
    )
    assert isinstance(result.exception, UsageError)
    assert "valid: llamacpp, sglang, vllm" in str(result.exception)


def test_progress_without_a_terminal_is_a_line_per_change_and_every_15_s() -> None:
    import io

    from rich.console import Console

    from kvroute.cli.engines import _ProgressLines
    from kvroute.engines.base import Health, HealthState
    from kvroute.engines.local import StartProgress
    from kvroute.engines.state import EngineRecord

    rec = EngineRecord("vllm", 8001, "http://127.0.0.1:8001", "m", 1, 1, 0.0, "/l", ())
    out = io.StringIO()
    lines = _ProgressLines(Console(file=out, width=200))
    for t, state in [
        (0, HealthState.UNREACHABLE),
        (5, HealthState.UNREACHABLE),
        (16, HealthState.UNREACHABLE),
        (20, HealthState.UNREACHABLE),
        (64, HealthState.READY),
    ]:
        lines([StartProgress(rec, float(t), Health(state))])
    assert out.getvalue().splitlines() == [
        "vllm-8001: unreachable after 0s",
        "vllm-8001: unreachable after 16s",
        "vllm-8001: ready after 1m04s",
    ]
