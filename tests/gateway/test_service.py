from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli.main import build_cli
from kvroute.cli.serve import serve_cmd
from kvroute.engines.state import EngineRecord
from kvroute.errors import InputError, UsageError
from kvroute.gateway.access.auth import hash_key
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.gateway.config.gateway import ListenerConfig
from kvroute.gateway.config.zeroconfig import config_from_records


def test_hash_key_reads_stdin() -> None:
    result = CliRunner().invoke(serve_cmd, ["--hash-key"], input="sk-secret\n")
    assert result.exit_code == 0 and result.output.strip() == hash_key("sk-secret")


def test_check_validates_and_summarises(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n")
    result = CliRunner().invoke(serve_cmd, ["--config", str(path), "--check"])
    assert result.exit_code == 0
    assert "ok: 1 backend, 1 route, 0 keys, listening on 127.0.0.1:8000" in result.output


def record(port: int, engine: str = "llamacpp", argv: tuple[str, ...] = ()) -> EngineRecord:
    return EngineRecord(engine, port, f"http://127.0.0.1:{port}", "Smol", 1, 1, 0.0, "/l", argv)


def test_zero_config_fronts_recorded_engines() -> None:
    config = config_from_records([record(1), record(2)], ListenerConfig(), "state")
    assert [(b.name, b.url, b.models, b.pool) for b in config.backends] == [
        ("llamacpp-1", "http://127.0.0.1:1", ("Smol",), "llamacpp"),
        ("llamacpp-2", "http://127.0.0.1:2", ("Smol",), "llamacpp"),
    ]
    # Sessions stay where their prefix is cached.
    assert [(r.pool, r.policy, r.models) for r in config.routes] == [
        ("llamacpp", "cache_aware", ())
    ]


def test_zero_config_keeps_one_engine_kind_per_pool_and_their_cache_settings() -> None:
    llama = ("llama-server", "--parallel", "2", "--ctx-size", "8192", "--cache-ram", "0")
    vllm = ("python", "-m", "vllm", "--block-size", "32", "--max-num-seqs", "4")
    records = [record(1, "llamacpp", llama), record(2, "vllm", vllm), record(3, "vllm", vllm)]
    config = config_from_records(records, ListenerConfig(), "state")
    assert {b.name: b.pool for b in config.backends} == {
        "llamacpp-1": "llamacpp",
        "vllm-2": "vllm",
        "vllm-3": "vllm",
    }
    cache = {b.name: b.cache for b in config.backends}
    assert cache["vllm-2"].block_size_tokens == 32
    assert (cache["llamacpp-1"].slots, cache["llamacpp-1"].capacity_tokens) == (2, 8192)
    assert cache["llamacpp-1"].cache_ram_mib == 0
    # MODEL@KIND picks a kind; the rest goes to the kind with more replicas.
    routes = [(r.models, r.pool, r.upstream_model, r.policy) for r in config.routes]
    assert routes == [
        (("Smol@llamacpp",), "llamacpp", "Smol", "cache_aware"),
        (("Smol@vllm",), "vllm", "Smol", "cache_aware"),
        ((), "vllm", None, "cache_aware"),  # one model: any name a client asks for
    ]
    mixed = config_from_records(records, ListenerConfig(), "state", mixed=True)
    assert {b.pool for b in mixed.backends} == {"default"}
    assert [(r.pool, r.policy) for r in mixed.routes] == [("default", "cache_aware")]


def test_the_cache_view_models_vllm_at_its_configured_block_size(tmp_path: Path) -> None:
    from kvroute.gateway.cacheview.view import BackendCacheView
    from kvroute.gateway.config.gateway import load_config

    path = tmp_path / "gw.yaml"
    path.write_text(
        "backends: [{name: v, url: 'http://127.0.0.1:1', engine: vllm,"
        " cache: {block_size_tokens: 32}}]\n"
    )
    cache = load_config(path).backends[0].cache
    assert BackendCacheView("vllm", cache).model.unit_tokens == 32
    assert BackendCacheView("vllm", CacheViewConfig()).model.unit_tokens == 16
    path.write_text(
        "backends: [{name: v, url: 'http://127.0.0.1:1', engine: vllm,"
        " cache: {block_size_tokens: 0}}]\n"
    )
    with pytest.raises(InputError, match="block_size_tokens"):
        load_config(path)


def test_zero_config_without_engines_says_how_to_start_some() -> None:
    with pytest.raises(UsageError) as err:
        config_from_records([], ListenerConfig(), "state")
    assert "kvroute engines up" in (err.value.hint or "")


def test_serve_reloads_on_sighup_and_stops_on_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    import httpx

    from gateway.harness import free_port, serve_subprocess

    port = free_port()
    path = tmp_path / "gw.yaml"

    def write(model: str) -> None:
        path.write_text(
            f"listener: {{port: {port}}}\n"
            f"backends: [{{name: a, url: 'http://127.0.0.1:9', engine: vllm, model: {model}}}]\n"
            "health: {interval_s: 60}\n"
        )

    def models() -> list[str]:
        return [m["id"] for m in httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"]]

    write("first")
    with serve_subprocess(path, port, "--quiet", stderr=subprocess.PIPE) as proc:
        assert models() == ["first"]
        write("second")
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while models() != ["second"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert models() == ["second"]
        path.write_text("backends: nonsense\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert models() == ["second"]  # a bad file leaves the running config
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        errors = proc.stderr.read() if proc.stderr else ""
    assert "reload failed" in errors


def test_check_applies_host_and_port_overrides_and_warns_like_serving(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "listener: {port: 18477}\nbackends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n"
    )
    argv = ["--config", str(path), "--check", "--host", "0.0.0.0", "--port", "9000"]
    result = CliRunner().invoke(serve_cmd, argv)
    assert result.exit_code == 0
    assert "listening on 0.0.0.0:9000" in result.stdout
    assert "warning: listening on 0.0.0.0 with no API keys" in result.stderr


@pytest.mark.parametrize("check", [True, False])
def test_unwritable_capture_directory_is_one_config_error_before_listening(
    tmp_path: Path, check: bool
) -> None:
    (tmp_path / "log.jsonl").write_text("{}\n")
    path = tmp_path / "gw.yaml"
    path.write_text(
        "backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n"
        f"capture: {{directory: '{tmp_path / 'log.jsonl' / 'cap'}'}}\n"
    )
    argv = ["serve", "--config", str(path), "--port", "0", *(["--check"] if check else [])]
    result = CliRunner().invoke(build_cli(), argv)
    assert result.exit_code == 3
    first, hint = result.stderr.splitlines()
    assert first.startswith(f"error: {path}, field 'capture.directory': cannot write capture")
    assert f"{tmp_path / 'log.jsonl'} exists and is not a directory" in first
    assert hint.startswith("hint: ") and "Traceback" not in result.output


def test_check_creates_a_missing_capture_directory(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n"
        f"capture: {{directory: '{tmp_path / 'new' / 'cap'}'}}\n"
    )
    result = CliRunner().invoke(serve_cmd, ["--config", str(path), "--check"])
    assert result.exit_code == 0 and (tmp_path / "new" / "cap").is_dir()


def test_check_lists_every_config_error_on_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "backends:\n"
        "  - {name: a, url: 'ftp://x', engine: vllm}\n"
        "  - {name: b, url: 'http://127.0.0.1:1', engine: vlm}\n"
        "routes: [{pool: default, policy: magic}]\n"
    )
    result = CliRunner().invoke(build_cli(), ["serve", "--config", str(path), "--check"])
    assert result.exit_code == 3
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        f"error: {path}:2, field 'backends[0].url': must be an http://host:port URL, got 'ftp://x'",
        f"error: {path}:3, field 'backends[1].engine': unknown engine 'vlm' "
        "(valid: llamacpp, vllm, sglang)",
    ]
    assert lines[2].startswith(f"error: {path}:4, field 'routes[0].policy': unknown policy 'magic'")
    assert len(lines) == 3
    assert "ok:" not in result.stdout
