"""``kvroute simulate``: the terminal summary, ``--json`` and ``--html``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson
from rich.console import Console

from kvroute.cache.result import SimulationResult
from kvroute.cli.files import STDOUT, emit, emit_page
from kvroute.predict.result import Prediction
from kvroute.validate.result import ValidationResult


def write_outputs(
    result: SimulationResult,
    validation: ValidationResult | None,
    console: Console,
    *,
    json_path: Path | None,
    html_path: Path | None,
    quiet: bool,
    latency: Sequence[Prediction] | None = None,
) -> None:
    """Print the summary (unless ``quiet``), then write the JSON and HTML asked for.
    ``latency``: ``--latency``'s predictions, printed after the hit table and written
    to the JSON as ``latency``."""
    if not quiet:
        from kvroute.report.simulate.console import render_console

        render_console(result, console)
        if validation is not None:
            from kvroute.report.simulate.validation import render_validation

            render_validation(validation, console)
        if latency is not None:
            from kvroute.cli.simulate.latency import render_latency

            render_latency(latency, console)
    if json_path is not None:
        data = to_json(result, validation, latency)
        emit(json_path, data)
        if json_path != STDOUT:
            console.print(f"wrote {json_path}")
    if html_path is not None:
        from kvroute.report.simulate.page import simulation_page

        emit_page(html_path, simulation_page(result, datetime.now(UTC), validation))
        if html_path != STDOUT:
            console.print(f"wrote {html_path}")


def _dataclass_fields(obj: object) -> dict[str, object]:
    """orjson's ``default`` for dataclasses: their fields in order, as orjson writes them.

    Dataclasses pass through here (``OPT_PASSTHROUGH_DATACLASS``) because orjson's own
    dataclass path reads the compiled engine settings' (``kvroute._accel``) unboxed
    ``bool``/``float`` fields as objects and crashes the interpreter.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def json_bytes(document: object, *, indent: bool = True) -> bytes:
    """``document`` (dataclasses, numpy arrays, plain values) as JSON."""
    opt = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATACLASS
    if indent:
        opt |= orjson.OPT_INDENT_2
    return orjson.dumps(document, default=_dataclass_fields, option=opt)


def to_json(
    result: SimulationResult,
    validation: ValidationResult | None,
    latency: Sequence[Prediction] | None = None,
) -> bytes:
    if validation is None and latency is None:
        return json_bytes(result) + b"\n"
    merged = orjson.loads(json_bytes(result, indent=False))
    if validation is not None:
        merged["validation"] = validation
    if latency is not None:
        from kvroute.cli.simulate.latency import latency_json

        merged["latency"] = latency_json(latency)
    return json_bytes(merged) + b"\n"
