"""The ``kvroute`` command. Every subcommand is registered here; errors are mapped once.

Exit codes: 0 success, 1 unexpected failure, 2 usage error, 3 unreadable or invalid
input, 4 tokenizer problem, 5 engine problem, 6 analyze below ``--fail-under``, 130 interrupted, 141 standard output
closed by its reader (``kvroute analyze t.jsonl | head -1``).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from kvroute import __version__
from kvroute.errors import InputErrors, KvrouteError

HELP = """kvroute: measure how your LLM traffic shares prefixes, predict what llama.cpp,
vLLM and SGLang would cache, benchmark them, and route between them.

\b
Start with:   kvroute analyze your-log.jsonl --html report.html
No data yet:  kvroute sample sample.jsonl && kvroute analyze sample.jsonl
Engines:      kvroute engines up --engine llamacpp
"""


EXIT_STDOUT_CLOSED = 141
"""Exit status when the reader of standard output goes away (``| head -1``).

Tools that keep the default SIGPIPE action (``grep``, ``cat``, ``seq``) die of the
signal there, which a shell reports as 128 + 13 = 141; Python ignores SIGPIPE and
raises :class:`BrokenPipeError` instead, with a traceback and status 1. kvroute exits
141 without a word, like those tools: the output was cut, so success (0) would be a lie
under ``set -o pipefail``, yet nothing failed that a message could help with. Restoring
the default signal action instead would also kill ``kvroute serve`` whenever a client
hangs up mid-response.
"""


def _stdout_closed() -> None:
    """Point standard output at the null device, so that flushing what is still
    buffered when the interpreter exits does not raise a second, reported error."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a real file (click's test runner)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _messages(exc: KvrouteError) -> list[str]:
    """One line per error: an :class:`InputErrors` (a config checked whole) holds several."""
    if isinstance(exc, InputErrors):
        return [e.message for e in exc.errors]
    return [exc.message]


class _Main(click.Group):
    """Maps :class:`KvrouteError` to one line on stderr and its exit code; never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KvrouteError as exc:
            for message in _messages(exc):
                click.secho(f"error: {message}", fg="red", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            _stdout_closed()
            ctx.exit(EXIT_STDOUT_CLOSED)
        except click.UsageError as exc:
            # click's own usage block looks like another program's; every error reads
            # alike: one "error:" line, one "hint:" line, exit 2.
            at = exc.ctx or ctx
            what = "commands" if isinstance(at.command, click.Group) else "options"
            # one line: click lists choices on tab-indented lines of their own
            click.secho(f"error: {' '.join(exc.format_message().split())}", fg="red", err=True)
            click.echo(f"hint: `{at.command_path} --help` lists the {what}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            if os.environ.get("KVROUTE_DEBUG"):
                raise
            click.secho(f"internal error: {type(exc).__name__}: {exc}", fg="red", err=True)
            click.echo(
                "hint: this is a kvroute bug; rerun with KVROUTE_DEBUG=1 for the traceback and report it",
                err=True,
            )
            ctx.exit(1)


# name -> (module, attribute, one-line help); modules load only when their command runs,
# so `kvroute analyze` does not pay for the HTTP stack of `kvroute engines`.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "analyze": (
        "kvroute.cli.analyze.command",
        "analyze_cmd",
        "Measure how much of a trace's prompts share a prefix, and how long.",
    ),
    "sample": (
        "kvroute.cli.analyze.command",
        "sample_cmd",
        "Write a deterministic sample OpenAI request log.",
    ),
    "explain": (
        "kvroute.cli.explain",
        "explain_cmd",
        "Explain one request's prefix reuse: from which request, which segments, per engine.",
    ),
    "export": (
        "kvroute.cli.export",
        "export_cmd",
        "Write an anonymized hash-only copy of a trace, keyed by a secret key file.",
    ),
    "simulate": (
        "kvroute.cli.simulate.command",
        "simulate_cmd",
        "Predict what llama.cpp, vLLM and SGLang would cache on a trace, at a KV capacity.",
    ),
    "presets": (
        "kvroute.cli.presets",
        "presets_cmd",
        "List the model and GPU presets simulate sizes the KV pool from.",
    ),
    "predict": (
        "kvroute.cli.predict.command",
        "predict_cmd",
        "Predict TTFT, TPOT and E2E per engine for a trace or a synthetic load, on a GPU.",
    ),
    "calibrate": (
        "kvroute.cli.calibrate",
        "calibrate_cmd",
        "Fit the latency predictor's step-time coefficients on a live engine.",
    ),
    "advise": (
        "kvroute.cli.advise.command",
        "advise_cmd",
        "Advise an engine per workload class, its flags, a gateway config and alerts.",
    ),
    "bench": (
        "kvroute.cli.bench.command",
        "bench_group",
        "Benchmark endpoints with workload-shaped load, side by side.",
    ),
    "serve": (
        "kvroute.cli.serve",
        "serve_cmd",
        "Serve one OpenAI-compatible gateway over llama.cpp, vLLM and SGLang backends.",
    ),
    "engines": (
        "kvroute.cli.engines",
        "engines_group",
        "Start, inspect and stop real local engines (llama.cpp, vLLM).",
    ),
}


class _LazyMain(_Main):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module = importlib.import_module(spec[0])
        cmd = getattr(module, spec[1])
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, spec[2]) for name, spec in COMMANDS.items()])


def build_cli() -> click.Group:
    """The ``kvroute`` command group; subcommands are imported on first use."""
    group = _LazyMain(
        "kvroute",
        help=HELP,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )
    click.version_option(__version__, prog_name="kvroute")(group)
    return group


def main() -> None:
    build_cli()(prog_name="kvroute")


if __name__ == "__main__":  # pragma: no cover
    main()
