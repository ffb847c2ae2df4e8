"""``kvroute serve``: the OpenAI-compatible gateway (see docs/gateway.md)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from kvroute.engines.state import StateDir, default_state_dir
from kvroute.errors import UsageError
from kvroute.gateway.access.auth import hash_key
from kvroute.gateway.app import ACCESS_LOGGER, Gateway
from kvroute.gateway.capture.worker import check_capture_directory
from kvroute.gateway.config.gateway import GatewayConfig, ListenerConfig, load_config
from kvroute.gateway.config.zeroconfig import config_from_records
from kvroute.gateway.ops.logs import log_json_lines
from kvroute.gateway.service import serve_until_signalled
from kvroute.report.fmt import plural

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command("serve")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Gateway config (YAML). Without it: zero-config over `kvroute engines up` engines.",
)
@click.option("--host", help="Listen address (default: the config's, else 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(0, 65535), help="Listen port (default: the config's, else 8000)."
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Zero-config: where `engines up` recorded its engines [default: $KVROUTE_STATE_DIR or <cache>/state].",
)
@click.option(
    "--mix-engines",
    is_flag=True,
    help="Zero-config: one pool of every engine kind (default: one pool per kind).",
)
@click.option("--check", is_flag=True, help="Validate the config, print a summary and exit.")
@click.option(
    "--hash-key",
    "hash_key_flag",
    is_flag=True,
    help="Read an API key on stdin, print the sha256 the config stores for it, and exit.",
)
@click.option("--no-access-log", is_flag=True, help="Do not write the per-request access log.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
def serve_cmd(
    config_path: Path | None,
    host: str | None,
    port: int | None,
    state_dir: Path | None,
    mix_engines: bool,
    check: bool,
    hash_key_flag: bool,
    no_access_log: bool,
    quiet: bool,
) -> None:
    """Serve one OpenAI-compatible endpoint over llama.cpp, vLLM and SGLang backends.

    \b
    Routes each request by model and workload class (structured, agent, tools,
    long_prefix, chat, completion) to a pool, picks a backend with the route's
    policy, retries and fails over before the first byte, and exports Prometheus
    metrics on /metrics. SIGHUP reloads the config; SIGTERM drains streams.
    """
    if hash_key_flag:
        key = sys.stdin.readline().strip()
        if not key:
            raise UsageError("no key on stdin")
        click.echo(hash_key(key))
        return
    if mix_engines and config_path is not None:
        raise UsageError(
            "--mix-engines is for zero-config mode; with --config, pools are the config's"
        )
    config = _config(config_path, state_dir, mix_engines)
    if check:
        listen_host, listen_port = _preflight(config, host, port, _warn_plain)
        click.echo(
            f"ok: {plural(len(config.backends), 'backend')}, {plural(len(config.routes), 'route')}, "
            f"{plural(len(config.keys), 'key')}, listening on {listen_host}:{listen_port}"
        )
        return
    # From here on stderr is the gateway's log stream: JSON lines only (logs.py).
    log_json_lines(sys.stderr, logging.WARNING if quiet else logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # health probes are not news
    if no_access_log:
        logging.getLogger(ACCESS_LOGGER).setLevel(logging.WARNING)
    logger = logging.getLogger("kvroute.gateway")
    listen_host, listen_port = _preflight(config, host, port, lambda m: logger.warning("%s", m))
    gateway = Gateway(config, config_path=config_path)

    def listening(bound: int) -> None:
        base = f"http://{listen_host}:{bound}"
        logger.info(
            "kvroute gateway on %s/v1 (status %s/kvroute/status, metrics %s/metrics); %s; %s",
            base,
            base,
            base,
            plural(len(config.backends), "backend")
            + ": "
            + ", ".join(f"{b.name} ({b.engine}, pool {b.pool})" for b in config.backends),
            plural(len(config.routes), "route")
            + ": "
            + ", ".join(f"{r.name} -> {r.pool} by {r.policy}" for r in config.routes),
        )

    _run(serve_until_signalled(gateway, host=listen_host, port=listen_port, on_listening=listening))
    logger.info("kvroute gateway stopped")


def _preflight(
    config: GatewayConfig, host: str | None, port: int | None, warn: Callable[[str], None]
) -> tuple[str, int]:
    """What --check and serving share: the listen address after the --host/--port
    overrides, the capture directory (created and checked), the open-bind warning
    (given to ``warn``: a plain line for --check, a log record when serving)."""
    listen_host = host or config.listener.host
    listen_port = config.listener.port if port is None else port
    if config.capture.enabled:
        check_capture_directory(config.capture, config.source)
    if listen_host not in _LOOPBACK and not config.keys:
        warn(
            f"listening on {listen_host} with no API keys: anyone who can reach "
            "it can use your backends"
        )
    return listen_host, listen_port


def _warn_plain(message: str) -> None:
    click.secho(f"warning: {message}", fg="yellow", err=True)


def _config(config_path: Path | None, state_dir: Path | None, mixed: bool) -> GatewayConfig:
    if config_path is not None:
        return load_config(config_path)
    state = StateDir(state_dir or default_state_dir())
    return config_from_records(state.records(), ListenerConfig(), str(state.root), mixed=mixed)


def _run(main: Coroutine[Any, Any, int]) -> None:
    try:
        import uvloop
    except ImportError:  # optional: a faster event loop
        asyncio.run(main)
        return
    uvloop.run(main)
