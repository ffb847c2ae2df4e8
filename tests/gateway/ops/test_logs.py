"""The gateway's stderr is a log stream of JSON lines only: access lines and every other
record (capture failures, reload errors, the listening line) alike, so a log shipper
can parse each line."""

from __future__ import annotations

import io
import json
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from gateway.fake_upstream import FakeUpstream
from gateway.harness import free_port, serve_subprocess
from kvroute.gateway.ops.logs import JsonLinesFormatter


def _wait_for(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_every_line_on_stderr_is_one_json_record(tmp_path: Path, fake: FakeUpstream) -> None:
    port = free_port()
    capture = tmp_path / "cap"
    path = tmp_path / "gw.yaml"
    path.write_text(
        f"listener: {{port: {port}, drain_timeout_s: 5}}\n"
        f"backends: [{{name: f1, url: '{fake.url}', engine: vllm}}]\n"
        f"capture: {{directory: '{capture}', rotate_bytes: 1, flush_interval_s: 0.01}}\n"
        "health: {interval_s: 60}\n"
    )
    log = tmp_path / "stderr.txt"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with log.open("w") as stderr, serve_subprocess(path, port, stderr=stderr) as proc:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=10).status_code == 200
        _wait_for(lambda: any(capture.glob("*.jsonl*")))
        # Provoke a capture warning: a file where the capture directory was.
        capture.rename(tmp_path / "moved")
        capture.write_text("not a directory\n")
        assert httpx.post(url, json=body, timeout=10).status_code == 200
        _wait_for(lambda: "capture cannot write" in log.read_text())
        path.write_text("backends: nonsense\n")  # and a reload error
        proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: "reload failed" in log.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # fails on any plain-text line
    assert all(isinstance(r, dict) for r in records)
    assert all(
        isinstance(r["ts"], float) and r["level"] and r["logger"].startswith("kvroute.")
        for r in records
    ), records
    by_logger: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_logger.setdefault(r["logger"], []).append(r)
    access = [r for r in by_logger["kvroute.gateway.access"] if r["path"] == "/v1/chat/completions"]
    assert len(access) == 2 and all(r["status"] == 200 and r["request_id"] for r in access)
    (lost,) = [r for r in by_logger["kvroute.gateway.capture"] if r["level"] == "error"]
    assert lost["msg"].startswith(f"capture cannot write to {capture}")
    messages = [(r["level"], r["msg"]) for r in by_logger["kvroute.gateway"]]
    assert any(m.startswith("kvroute gateway on http://") for _, m in messages)
    assert any(level == "error" and m.startswith("reload failed") for level, m in messages)


def test_an_exception_is_one_line_with_its_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLinesFormatter())
    logger = logging.getLogger("kvroute.gateway.test_logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            _ = 1 / 0
        except ZeroDivisionError:
            logger.exception("internal error answering %s %s", "POST", "/v1/x")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "error" and record["logger"] == "kvroute.gateway.test_logs"
    assert record["msg"] == "internal error answering POST /v1/x"
    assert record["exc"].startswith("Traceback") and "ZeroDivisionError" in record["exc"]
