"""Graceful drain of a real ``kvroute serve`` process: after SIGTERM (or SIGINT) the
listener stays open, /ready answers 503 and /health 200, a new completion gets a 503
OpenAI error with Retry-After, the stream in progress finishes, then the process exits.
A second signal cuts the drain short."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import free_port, serve_subprocess
from kvroute.engines.state import EngineRecord


@contextmanager
def serving(tmp_path: Path, backend_yaml: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A ``kvroute serve`` process over one backend; yields it and its base URL."""
    port = free_port()
    path = tmp_path / "gw.yaml"
    path.write_text(
        f"listener: {{port: {port}, drain_timeout_s: 120}}\n"
        f"backends: [{backend_yaml}]\n"
        "health: {interval_s: 60}\n"
    )
    with (
        (tmp_path / "stderr.txt").open("w") as stderr,
        serve_subprocess(path, port, stderr=stderr) as proc,
    ):
        yield proc, f"http://127.0.0.1:{port}"


class Stream(threading.Thread):
    """One streamed chat completion read line by line on its own thread."""

    def __init__(self, url: str, body: dict[str, object]) -> None:
        super().__init__()
        self.url, self.body = url, body
        self.started = threading.Event()
        self.lines: list[str] = []
        self.status = 0

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=60) as client,
                client.stream("POST", f"{self.url}/v1/chat/completions", json=self.body) as r,
            ):
                self.status = r.status_code
                for line in r.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.started.set()
        except httpx.TransportError:
            self.lines.append("<connection cut>")

    def contents(self) -> list[str]:
        out = []
        for line in self.lines:
            if line.startswith("data: {"):
                for choice in orjson.loads(line[6:]).get("choices", []):
                    out.append(choice.get("delta", {}).get("content") or "")
        return out


def probe_during_drain(url: str, model: str) -> tuple[httpx.Response, ...]:
    with httpx.Client(base_url=url, timeout=10) as client:
        ready = client.get("/ready")
        health = client.get("/health")
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        new = client.post("/v1/chat/completions", json=body)
    return ready, health, new


@pytest.mark.engine
@pytest.mark.llamacpp
def test_drain_answers_probes_and_refuses_new_work_while_a_stream_finishes(
    tmp_path: Path, llamacpp_server: EngineRecord
) -> None:
    backend = (
        f"{{name: l1, url: '{llamacpp_server.base_url}', engine: llamacpp, "
        f"model: {llamacpp_server.model_name}}}"
    )
    with serving(tmp_path, backend) as (proc, url):
        body = {
            "model": llamacpp_server.model_name,
            "messages": [{"role": "user", "content": "Tell a long story about dragons."}],
            "max_tokens": 120,
            "ignore_eos": True,
            "stream": True,
        }
        stream = Stream(url, body)
        stream.start()
        assert stream.started.wait(30)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)  # the signal is handled on the gateway's loop
        ready, health, new = probe_during_drain(url, llamacpp_server.model_name)
        still_streaming = stream.is_alive()
        stream.join(120)
        assert proc.wait(30) == 0
        with pytest.raises(httpx.TransportError):  # gone once the drain is done
            httpx.get(f"{url}/health")
    assert still_streaming, "the stream ended before the probes: make it longer"
    assert ready.status_code == 503 and ready.json()["draining"] is True
    assert health.status_code == 200
    assert new.status_code == 503 and new.headers["retry-after"] == "1"
    assert new.json()["error"]["code"] == "draining"
    assert new.headers.get("connection") == "close"
    assert stream.status == 200 and stream.lines[-1] == "data: [DONE]"
    assert len(stream.contents()) >= 120  # every token arrived, the last one included
    log = (tmp_path / "stderr.txt").read_text()
    assert "draining: 1 requests in progress" in log and "Traceback" not in log


def test_sigint_drains_too_and_a_second_one_cuts_the_drain(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    fake.num_tokens, fake.token_interval_s = 1000, 0.05  # a 50 s stream
    with serving(tmp_path, f"{{name: f1, url: '{fake.url}', engine: vllm}}") as (proc, url):
        stream = Stream(
            url, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        )
        stream.start()
        assert stream.started.wait(10)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        time.sleep(0.5)
        ready, health, new = probe_during_drain(url, "m")
        metrics = httpx.get(f"{url}/metrics").text
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        stopped_s = time.monotonic() - started
        stream.join(10)
    assert (ready.status_code, health.status_code, new.status_code) == (503, 200, 503)
    assert 'kvroute:errors_total{kind="draining"} 1' in metrics
    assert stopped_s < 5  # not the 120 s drain timeout, nor the 50 s stream
    # the cut stream says why it is incomplete (it used to end mid-body), and the log too
    assert stream.lines[-1] == "data: [DONE]" and '"code":"draining"' in stream.lines[-2]
    log = (tmp_path / "stderr.txt").read_text()
    assert "second signal: cutting 1 requests now" in log
    assert "drain over: cut 1 requests in progress" in log


def _serve_with_grace(tmp_path: Path, fake: FakeUpstream, grace_s: float) -> tuple[Path, int]:
    port = free_port()
    path = tmp_path / "gw.yaml"
    path.write_text(
        f"listener: {{port: {port}, drain_timeout_s: 120, drain_grace_s: {grace_s}}}\n"
        f"backends: [{{name: f1, url: '{fake.url}', engine: vllm}}]\n"
        "health: {interval_s: 60}\n"
    )
    return path, port


def test_drain_grace_keeps_ready_503_though_nothing_is_in_progress(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    path, port = _serve_with_grace(tmp_path, fake, 1.5)
    url = f"http://127.0.0.1:{port}"
    with serve_subprocess(path, port, "--quiet") as proc:
        assert httpx.get(f"{url}/ready").status_code == 200
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        ready, health, new = probe_during_drain(url, "m")
        assert proc.wait(10) == 0
        stopped_s = time.monotonic() - started
    assert (ready.status_code, health.status_code, new.status_code) == (503, 200, 503)
    assert 1.5 <= stopped_s < 5


def test_a_second_signal_cuts_the_drain_grace(tmp_path: Path, fake: FakeUpstream) -> None:
    path, port = _serve_with_grace(tmp_path, fake, 60)
    with serve_subprocess(path, port, "--quiet") as proc:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # still in its grace
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 5
