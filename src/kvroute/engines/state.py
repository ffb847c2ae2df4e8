"""The state directory: one record per engine that ``up`` started, and its log.

A record is written right after its process starts, before it is healthy, so an engine
is never running without one: ``down`` can stop it even when the ``up`` that started
it crashed. A record names the process by pid *and* start time (:class:`ProcessId`),
so a record that outlived its process is recognised as stale, never acted on.

Layout::

    <state dir>/engines/<engine>-<port>.json    one EngineRecord
    <state dir>/logs/<engine>-<port>.log        the engine's stdout and stderr
    <state dir>/run/<engine>-<port>/            files the engine writes (slot saves)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvroute.engines.paths import cache_dir
from kvroute.engines.process import ProcessId
from kvroute.errors import EngineError


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """One engine started by kvroute: what, where, which process, which log."""

    engine: str
    port: int
    base_url: str
    model_name: str
    pid: int
    start_ticks: int
    started_at_unix_s: float
    log_path: str
    argv: tuple[str, ...]
    threads: int | None = None
    """Compute threads it was started with (None: not recorded, an older record)."""
    cpus: tuple[int, ...] = ()
    """The CPUs it was given (empty: not recorded)."""

    @property
    def name(self) -> str:
        """``<engine>-<port>``: unique among running engines, since ports are."""
        return f"{self.engine}-{self.port}"

    @property
    def process(self) -> ProcessId:
        return ProcessId(pid=self.pid, start_ticks=self.start_ticks)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "port": self.port,
            "base_url": self.base_url,
            "model_name": self.model_name,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "started_at_unix_s": self.started_at_unix_s,
            "log_path": self.log_path,
            "argv": list(self.argv),
            "threads": self.threads,
            "cpus": list(self.cpus),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineRecord:
        try:
            return cls(
                engine=str(data["engine"]),
                port=int(data["port"]),
                base_url=str(data["base_url"]),
                model_name=str(data["model_name"]),
                pid=int(data["pid"]),
                start_ticks=int(data["start_ticks"]),
                started_at_unix_s=float(data["started_at_unix_s"]),
                log_path=str(data["log_path"]),
                argv=tuple(str(a) for a in data["argv"]),
                threads=None if data.get("threads") is None else int(data["threads"]),
                cpus=tuple(int(c) for c in data.get("cpus") or ()),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineError(f"engine record is malformed: {exc!r}") from None


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$KVROUTE_STATE_DIR``, else ``<cache dir>/state``."""
    env = os.environ if env is None else env
    if env.get("KVROUTE_STATE_DIR"):
        return Path(env["KVROUTE_STATE_DIR"]).expanduser()
    return cache_dir(env) / "state"


class StateDir:
    """Reads and writes the records under ``root``. Holds no records in memory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def _records_dir(self) -> Path:
        return self.root / "engines"

    def log_path(self, engine: str, port: int) -> Path:
        return self.root / "logs" / f"{engine}-{port}.log"

    def run_dir(self, engine: str, port: int) -> Path:
        return self.root / "run" / f"{engine}-{port}"

    def records(self) -> list[EngineRecord]:
        """Every record, ordered by engine then port. A record file that cannot be read
        raises :class:`EngineError` naming it (delete it once its process is checked)."""
        if not self._records_dir.is_dir():
            return []
        found: list[EngineRecord] = []
        for path in sorted(self._records_dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise EngineError(f"cannot read engine record {path}: {exc}") from None
            found.append(EngineRecord.from_json(data))
        return sorted(found, key=lambda r: (r.engine, r.port))

    def add(self, record: EngineRecord) -> None:
        """Write ``record`` atomically (write a temporary file, then rename)."""
        self._records_dir.mkdir(parents=True, exist_ok=True)
        path = self._records_dir / f"{record.name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
        tmp.replace(path)

    def remove(self, record: EngineRecord) -> None:
        """Delete ``record``'s file; its log stays for post-mortems."""
        (self._records_dir / f"{record.name}.json").unlink(missing_ok=True)
