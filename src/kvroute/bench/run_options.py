"""What a ``kvroute bench`` run is told: the endpoints (``name=URL[,engine=…]``), how
several endpoints share a run, and the run options (loads, cache state, timeouts, body
switches, client shape, SLOs, cancellation), with the JSON they are recorded as."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvroute.bench import scrape
from kvroute.bench.results.metrics import Slo
from kvroute.bench.schedule import CancelSpec, Load
from kvroute.engines.state import EngineRecord
from kvroute.errors import UsageError
from kvroute.http.client import Origin


@dataclass(frozen=True, slots=True)
class BenchEndpoint:
    """An endpoint under test, as ``--endpoint`` gives it: a name for the results, the
    OpenAI-compatible base URL, and what is known of the server behind it."""

    name: str
    url: str
    engine: str | None = None
    model: str | None = None
    api_key: str | None = None
    threads: int | None = None
    """Compute threads the engine runs (``threads=N``, or from ``kvroute engines up``'s
    record of it); None: unknown. Results record it so unlike endpoints are flagged."""
    cpus: tuple[int, ...] = ()
    """The CPUs it was given, when ``engines up`` started it; empty: unknown."""

    @classmethod
    def parse(cls, spec: str) -> BenchEndpoint:
        """``name=URL[,engine=E][,model=M][,key=K][,threads=N]``."""
        head, *rest = spec.split(",")
        name, sep, url = head.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise UsageError(
                f"bad endpoint {spec!r}",
                hint="use name=http://host:port[,engine=llamacpp|vllm|sglang][,model=M][,key=K]"
                "[,threads=N]",
            )
        extra: dict[str, str] = {}
        for part in rest:
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("engine", "model", "key", "threads"):
                raise UsageError(
                    f"bad endpoint option {part!r} in {spec!r}",
                    hint="options: engine=, model=, key=, threads=",
                )
            extra[key.strip()] = value.strip()
        Origin.parse(scrape.root_url(url.strip()))
        threads = extra.get("threads")
        if threads is not None and not (threads.isdigit() and int(threads) >= 1):
            raise UsageError(
                f"bad threads={threads!r} in {spec!r}", hint="threads= takes a whole number ≥ 1"
            )
        return cls(
            name.strip(),
            url.strip(),
            extra.get("engine"),
            extra.get("model"),
            extra.get("key"),
            None if threads is None else int(threads),
        )


def with_recorded_compute(
    endpoint: BenchEndpoint, records: Sequence[EngineRecord]
) -> BenchEndpoint:
    """``endpoint`` with the threads and CPUs ``kvroute engines up`` recorded for the
    engine at its URL (``threads=`` given on the command line wins); unchanged when no
    record matches."""
    base = endpoint.url.rstrip("/").removesuffix("/v1")
    record = next((r for r in records if r.base_url.rstrip("/") == base), None)
    if record is None:
        return endpoint
    return replace(
        endpoint,
        threads=endpoint.threads if endpoint.threads is not None else record.threads,
        cpus=endpoint.cpus or record.cpus,
    )


class SideBySide(enum.Enum):
    SEQUENTIAL = "sequential"
    CONCURRENT = "concurrent"


@dataclass(frozen=True, slots=True)
class RunOptions:
    loads: tuple[Load, ...]
    cache: scrape.CacheMode = scrape.CacheMode.COLD
    side_by_side: SideBySide = SideBySide.SEQUENTIAL
    first_token_timeout_s: float | None = 60.0
    timeout_s: float | None = 300.0
    max_duration_s: float = 600.0
    """Bound on each run (endpoint × step × repeat) from its first intended send."""
    stream: bool = True
    ignore_eos: bool = False
    temperature: float | None = None
    """Sent with every request when set (0: greedy, so each engine's answers, and with
    them E2E and TPOT, are the same from run to run); None: the engine's default."""
    workers: int = 1
    max_connections: int = 1024
    prewarm: int | None = None
    """Connections opened before a run (None: closed loop one per user, open loop none)."""
    spare_connections: int = 2
    """Open loop: connections opened in the background whenever fewer are idle, so a
    send rarely waits for a connect."""
    dispatch_spin_s: float = 0.0
    """Open loop: poll the last ``dispatch_spin_s`` before each send (CPU for precision)."""
    slo: Slo | None = None
    cancel: CancelSpec | None = None
    seed: int = 0
    repeats: int = 1

    def describe(self) -> dict[str, Any]:
        return {
            "cache": self.cache.value,
            "first_token_timeout_s": self.first_token_timeout_s,
            "timeout_s": self.timeout_s,
            "max_duration_s": self.max_duration_s,
            "stream": self.stream,
            "ignore_eos": self.ignore_eos,
            "temperature": self.temperature,
            "workers": self.workers,
            "max_connections": self.max_connections,
            "spare_connections": self.spare_connections,
            "dispatch_spin_s": self.dispatch_spin_s,
            "slo": None
            if self.slo is None
            else {"ttft_s": self.slo.ttft_s, "tpot_s": self.slo.tpot_s, "e2e_s": self.slo.e2e_s},
            "cancel": None
            if self.cancel is None
            else {
                "share": self.cancel.share,
                "after_min": self.cancel.after_min,
                "after_max": self.cancel.after_max,
            },
            "seed": self.seed,
            "repeats": self.repeats,
        }
