"""The result of ``kvroute bench``: plain dataclasses, written as versioned JSON.

``SCHEMA`` names the layout (docs/bench.md documents it); bump it on any incompatible
change. A result holds the workload's description, the options, and one
:class:`Run` per (endpoint, load step, repeat): the endpoint's engine, model and
cache state, its summary and every request's record (times in seconds from the run's
start). :func:`load_result` reads a file back into the same dataclasses.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import orjson

from kvroute.bench.results.metrics import Stat, Summary
from kvroute.bench.results.record import RequestRecord
from kvroute.errors import InputError
from kvroute.output_file import write_output

SCHEMA = "kvroute.bench/1"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    name: str
    params: dict[str, str]
    seed: int
    num_requests: int
    tokenizer: str
    prompt_tokens: Stat
    max_tokens: Stat
    num_sessions: int
    num_structured: int
    ideal_overlap: float | None
    """``kvroute analyze``'s token-level ideal hit ratio of the workload, when checked."""


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    name: str
    url: str
    engine: str | None
    model: str | None
    cache_state: str
    """cold (reset before the run), warm, salted, or unknown (no adapter)."""
    notes: list[str]
    threads: int | None = None
    """Compute threads the engine ran (``threads=`` or ``kvroute engines up``'s record);
    None: unknown."""
    cpus: list[int] | None = None
    """The CPUs ``kvroute engines up`` gave it; None: unknown."""


@dataclass(frozen=True, slots=True)
class LoadInfo:
    kind: str
    """open, closed or trace."""
    label: str
    rate_per_s: float | None = None
    arrival: str | None = None
    burstiness: float | None = None
    ramp_up_s: float | None = None
    concurrency: int | None = None
    think_s: float | None = None


@dataclass(frozen=True, slots=True)
class Run:
    endpoint: EndpointInfo
    step: int
    repeat: int
    load: LoadInfo
    started_at_unix_s: float
    summary: Summary
    requests: list[RequestRecord]
    interrupted: bool = False
    """Stopped by Ctrl-C: requests that had ended are as they ended, those on the wire
    have error kind ``interrupted``, the rest are not sent."""


@dataclass(frozen=True, slots=True)
class BenchResult:
    schema: str
    created_at_unix_s: float
    kvroute_version: str
    workload: WorkloadInfo
    options: dict[str, Any]
    side_by_side: str
    runs: list[Run]
    elapsed_s: float
    interrupted: bool = False
    """Stopped by Ctrl-C: ``runs`` holds the runs that finished and the one cut short
    (marked ``interrupted``); later steps are missing."""


def unserved_runs(result: BenchResult) -> list[Run]:
    """Runs in which the endpoint served no request at all (none ended ok or was
    cancelled on purpose mid-stream): the run measured nothing about the engine."""
    return [
        run
        for run in result.runs
        if run.requests
        and not run.interrupted
        and run.summary.num_ok + run.summary.num_cancelled == 0
    ]


def unserved_line(run: Run) -> str:
    """One line for an unserved run: where, and the first fault."""
    where = f"{run.endpoint.name} ({run.endpoint.url}) at {run.load.label}"
    first = next((r for r in run.requests if r.error_kind is not None), None)
    if first is None or first.error_kind is None:
        return f"{where}: no request succeeded ({run.summary.num_not_sent} not sent)"
    count = run.summary.errors.get(first.error_kind.value, 0)
    detail = f": {first.error_detail}" if first.error_detail else ""
    return (
        f"{where}: no request succeeded; {first.error_kind.value} "
        f"({count} of {len(run.requests)}){detail}"
    )


_NOT_WRITTEN = frozenset({"usage_body"})  # raw engine bodies: read into the record's fields


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: getattr(obj, f.name)
            for f in dataclasses.fields(obj)
            if f.name not in _NOT_WRITTEN
        }
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def result_bytes(result: BenchResult) -> bytes:
    """The result as indented JSON."""
    return (
        orjson.dumps(
            result, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATACLASS
        )
        + b"\n"
    )


def write_result(result: BenchResult, path: Path) -> None:
    """Write with :func:`kvroute.output_file.write_output`: a reader never sees half a
    file, and a link, FIFO or device at ``path`` stays one."""
    write_output(path, result_bytes(result))


def _decode(kind: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(kind)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, value, where)
            except (TypeError, ValueError, KeyError):
                continue
        raise TypeError(f"{where}: {value!r} fits none of {kind}")
    if origin is list:
        (item,) = typing.get_args(kind)
        return [_decode(item, v, f"{where}[]") for v in value]
    if origin is dict:
        _, item = typing.get_args(kind)
        return {str(k): _decode(item, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return from_dict(kind, value, where)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{where}: expected a number")
        return float(value)
    if kind in (int, str, bool):
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")
        return value
    return value  # Any


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """Build dataclass ``cls`` from decoded JSON, recursively; missing optional fields
    take their defaults."""
    if not isinstance(data, dict):
        raise TypeError(f"{where or cls.__name__}: expected an object")
    hints = get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
    return cls(**kwargs)


def load_result(path: Path) -> BenchResult:
    """Read a result file; raises :class:`InputError` when it is not one of this schema."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(f"cannot read a bench result: {exc}", path=str(path)) from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != SCHEMA:
        raise InputError(f"not a {SCHEMA} result (schema {schema!r})", path=str(path))
    try:
        return from_dict(BenchResult, data)
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError(f"malformed bench result: {exc}", path=str(path)) from None
