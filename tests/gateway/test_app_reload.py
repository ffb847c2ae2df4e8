"""Reload safety: a config that would leave nothing to serve, or open a gateway that
had keys, is refused and the running one stays; every reload is logged with who asked
and what changed; the new config's listener limits apply (max_body_bytes was kept)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, running_gateway
from gateway.test_app import CHAT, keyed_config, post
from kvroute.errors import InputError
from kvroute.gateway.access.auth import hash_key
from kvroute.gateway.config.gateway import load_config, parse_config

ADMIN = {"authorization": "Bearer sk-admin"}


def test_an_empty_backend_list_is_refused_at_its_line() -> None:
    with pytest.raises(InputError, match=r"gw.yaml:2.*backends.*at least one backend"):
        parse_config("listener: {port: 1}\nbackends: []\n", "gw.yaml")


def _open_config(url: str, allow: bool) -> str:
    return (
        f"backends: [{{name: b0, url: '{url}', engine: llamacpp, models: [m]}}]\n"
        "listener: {access_log: false}\nhealth: {interval_s: 60}\n"
        f"admin: {{key_sha256: {hash_key('sk-admin')}}}\n"
        + ("allow_no_keys: true\n" if allow else "")
        + ("keys: []\n" if not allow else "")
    )


def test_a_reload_that_drops_the_keys_is_refused_unless_allowed(
    loop_thread: LoopThread, fake: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(keyed_config(fake.url))
    caplog.set_level(logging.INFO, "kvroute.gateway")
    with running_gateway(loop_thread, load_config(path), config_path=path) as gw:
        path.write_text(_open_config(fake.url, allow=False))  # keys: [] (emptied)
        refused = httpx.post(f"{gw.url}/admin/reload", headers=ADMIN)
        still_closed = post(gw.url, None)
        path.write_text("backends: []\n")
        no_backends = httpx.post(f"{gw.url}/admin/reload", headers=ADMIN)
        path.write_text(_open_config(fake.url, allow=True))  # no keys section, meant
        reloaded = httpx.post(f"{gw.url}/admin/reload", headers=ADMIN)
        now_open = post(gw.url, None)
    assert refused.status_code == 400 and "would open the gateway" in refused.text
    assert still_closed.status_code == 401
    assert no_backends.status_code == 400 and "at least one backend" in no_backends.text
    assert reloaded.status_code == 200 and now_open.status_code == 200
    log = [r.getMessage() for r in caplog.records if r.name == "kvroute.gateway"]
    failed = [m for m in log if m.startswith("reload failed (POST /admin/reload from 127.0.0.1:")]
    assert len(failed) == 2
    done = [m for m in log if m.startswith("config reloaded (POST /admin/reload from 127.0.0.1:")]
    assert len(done) == 1
    assert "keys -alice -bob -carol" in done[0] and "allow_no_keys" in done[0]
    assert "sk-" not in " ".join(log)  # names, never keys or hashes


def test_max_body_bytes_follows_a_reload(
    loop_thread: LoopThread, fake: FakeUpstream, tmp_path: Path
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(keyed_config(fake.url))  # max_body_bytes: 2000
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    with running_gateway(loop_thread, load_config(path), config_path=path) as gw:
        before = post(gw.url, "sk-alice", big)
        path.write_text(
            keyed_config(fake.url).replace("max_body_bytes: 2000", "max_body_bytes: 9000")
        )
        assert httpx.post(f"{gw.url}/admin/reload", headers=ADMIN).status_code == 200
        after = post(gw.url, "sk-alice", big)
    assert before.status_code == 413 and after.status_code == 200
