"""``kvroute simulate``: the terminal summary, ``--json`` and ``--html``."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
from rich.console import Console

from kvroute.cache.result import SimulationResult
from kvroute.cli.files import write_atomic
from kvroute.validate.result import ValidationResult


def write_outputs(
    result: SimulationResult,
    validation: ValidationResult | None,
    console: Console,
    *,
    json_path: Path | None,
    html_path: Path | None,
    quiet: bool,
) -> None:
    """Print the summary (unless ``quiet``), then write the JSON and HTML asked for."""
    if not quiet:
        from kvroute.report.simulate_console import render_console

        render_console(result, console)
        if validation is not None:
            from kvroute.report.simulate_validation import render_validation

            render_validation(validation, console)
    if json_path is not None:
        data = to_json(result, validation)
        if json_path == Path("-"):
            click.echo(data.decode(), nl=False)
        else:
            write_atomic(json_path, data)
            console.print(f"wrote {json_path}")
    if html_path is not None:
        from kvroute.report.simulate_page import write_simulation_page

        write_simulation_page(result, html_path, validation=validation)
        console.print(f"wrote {html_path}")


def to_json(result: SimulationResult, validation: ValidationResult | None) -> bytes:
    opt = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    if validation is None:
        return orjson.dumps(result, option=opt) + b"\n"
    merged = orjson.loads(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY))
    merged["validation"] = validation
    return orjson.dumps(merged, option=opt) + b"\n"
