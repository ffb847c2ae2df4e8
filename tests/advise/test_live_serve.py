"""The gateway.yaml advise writes, served unchanged by a real `kvroute serve` in front of a
real llama-server, with the openai SDK as the client."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from click.testing import CliRunner

from gateway.harness import free_port
from kvroute.cli import main
from kvroute.engines.state import EngineRecord

pytestmark = [pytest.mark.engine, pytest.mark.llamacpp, pytest.mark.slow]


def test_advised_config_serves_a_real_llama_server(
    llamacpp_server: EngineRecord, tmp_path: Path
) -> None:
    runner = CliRunner()
    trace = tmp_path / "sample.jsonl"
    assert runner.invoke(main.build_cli(), ["sample", str(trace), "-n", "200"]).exit_code == 0
    out = tmp_path / "advice"
    result = runner.invoke(
        main.build_cli(),
        [
            "advise",
            str(trace),
            "--out",
            str(out),
            "--gpu",
            "cpu",
            "--model",
            "smollm2-135m",
            "--engines",
            "llamacpp",
            "--team-size",
            "1",
            "--workers",
            "1",
            "-q",
            "--url",
            f"llamacpp={llamacpp_server.base_url}",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvroute",
            "serve",
            "--config",
            str(out / "gateway.yaml"),
            "--port",
            str(port),
            "-q",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.3)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=llamacpp_server.model_name,
            messages=[{"role": "user", "content": "Name one colour."}],
            max_tokens=8,
        )
        answer = raw.parse()
        assert answer.choices[0].message.content
        assert raw.headers["x-kvroute-backend"] == "llamacpp-1"
        assert raw.headers["x-kvroute-class"] == "chat"
        assert (tmp_path / "capture").is_dir()  # capture on, relative to where serve runs
    finally:
        proc.terminate()
        proc.wait(timeout=30)
