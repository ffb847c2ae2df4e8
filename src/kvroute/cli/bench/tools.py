"""``kvroute bench compare | workloads | generate | report``: the tools around a bench run."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click
import orjson

from kvroute.cli.console import make_console
from kvroute.cli.files import STDOUT, check_outputs, emit, emit_page, parse_pairs, writes_stdout
from kvroute.errors import UsageError


@click.command("compare")
@click.argument("a", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.argument("b", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write an HTML comparison; '-' for stdout.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the differences as JSON; '-' for stdout.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option(
    "--force",
    is_flag=True,
    help="Compare even when the workloads, seeds or schedules differ (with a warning).",
)
def compare_cmd(
    a: Path, b: Path, html_path: Path | None, json_path: Path | None, seed: int, force: bool
) -> None:
    """Tabulate and chart the differences between two bench results A and B, with the
    noise each difference is judged against. A and B must have sent the same requests on
    the same schedule (same workload, parameters, seed and loads): otherwise a
    difference says nothing about the engines, and the comparison is refused."""
    from rich.markup import escape

    from kvroute.bench.compare import compare, mismatches
    from kvroute.bench.result import load_result
    from kvroute.report.bench.console import interrupted_text, render_comparison

    check_outputs({"--json": json_path, "--html": html_path}, inputs=[a, b])
    ra, rb = load_result(a), load_result(b)
    differ = mismatches(ra, rb)
    if differ and not force:
        raise UsageError(
            f"{a} and {b} are different experiments ({'; '.join(differ)}): their "
            "differences would not be the engines'",
            hint="rerun one with the other's workload, -p, --seed, -n and load, "
            "or pass --force to compare anyway",
        )
    pairs = compare(ra, rb, seed=seed)
    console = make_console(stderr=writes_stdout(json_path, html_path))
    if differ:
        console.print(
            f"[bold red]warning: A and B are different experiments[/] ({escape('; '.join(differ))}): "
            "the differences below mix the engines with the workloads"
        )
    for name, path, loaded in (("A", a, ra), ("B", b, rb)):
        note = interrupted_text(loaded)
        if note is not None:
            console.print(f"[bold red]{name} ({escape(str(path))}) was interrupted[/]: {note}")
    render_comparison(pairs, console)
    if json_path is not None:
        emit(json_path, orjson.dumps(pairs, option=orjson.OPT_INDENT_2) + b"\n")
    if html_path is not None:
        from kvroute.report.bench.page import compare_page

        emit_page(html_path, compare_page(ra, rb, pairs, datetime.now(UTC)))


@click.command("workloads")
@click.argument("name", required=False)
def workloads_cmd(name: str | None) -> None:
    """List the workloads and their parameters (or one workload's)."""
    from kvroute.bench.workloads.registry import workload_params, workload_registry

    names = [name] if name else workload_registry().names()
    for n in names:
        cls = workload_registry().get(n)
        doc = sys.modules[cls.__module__].__doc__ or cls.__doc__ or ""
        click.echo(click.style(n, bold=True) + "  " + _summary(doc, n))
        for p in workload_params(n):
            click.echo(f"  {p.name:<22} {p.type_name:<6} {p.default!s:<12} {p.doc}")


@click.command("generate")
@click.argument("workload")
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-p", "--param", "params", multiple=True, help="Workload parameter name=value.")
@click.option("-n", "--num-requests", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tokenizer", help="A .gguf or HF tokenizer directory (default: the SmolLM2 GGUF).")
@click.option(
    "--model",
    default="SmolLM2-135M-Instruct",
    show_default=True,
    help="The model name in each body.",
)
def generate_cmd(
    workload: str,
    out: Path,
    params: tuple[str, ...],
    num_requests: int,
    seed: int,
    tokenizer: str | None,
    model: str,
) -> None:
    """Write WORKLOAD's requests to OUT as an OpenAI request log (JSONL), which
    `kvroute analyze` reads: check the overlap a workload was built with."""
    from kvroute.bench.export import log_records
    from kvroute.bench.workloads.registry import generate
    from kvroute.trace.tokenizer import load_tokenizer

    check_outputs({"OUT": out})
    requests = generate(
        workload,
        num_requests,
        load_tokenizer(tokenizer),
        seed=seed,
        params=parse_pairs(params, "--param"),
    )
    emit(out, b"".join(orjson.dumps(r) + b"\n" for r in log_records(requests, model=model)))
    where = "stdout" if out == STDOUT else out
    click.echo(f"wrote {len(requests):,} requests to {where}", err=writes_stdout(out))


@click.command("report")
@click.argument("result", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the HTML report; '-' for stdout.",
)
@click.option("--wide", is_flag=True, help="Every column in the terminal table.")
def report_cmd(result: Path, html_path: Path | None, wide: bool) -> None:
    """Show a saved bench result again (terminal table, optional HTML report)."""
    from kvroute.bench.result import load_result
    from kvroute.report.bench.console import render_result

    check_outputs({"--html": html_path}, inputs=[result])
    loaded = load_result(result)
    render_result(loaded, make_console(stderr=writes_stdout(html_path)), wide=wide)
    if html_path is not None:
        from kvroute.report.bench.page import bench_page

        emit_page(html_path, bench_page(loaded, datetime.now(UTC)))


def _summary(doc: str, name: str) -> str:
    """A workload module's first paragraph as plain text: its ``name``: prefix and the
    reST literal marks dropped, its lines joined."""
    paragraph = doc.strip().split("\n\n", 1)[0]
    text = " ".join(line.strip() for line in paragraph.splitlines())
    text = text.removeprefix(f"``{name}``:").strip()
    return text.replace("``", "")
