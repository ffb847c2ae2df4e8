"""The ``kvroute`` command. Every subcommand is registered here; errors are mapped once.

Exit codes: 0 success, 1 unexpected failure, 2 usage error, 3 unreadable or invalid
input, 4 tokenizer problem, 5 engine problem, 130 interrupted.
"""

from __future__ import annotations

import os
from typing import Any

import click

from kvroute import __version__
from kvroute.errors import KvrouteError

HELP = """kvroute: measure how your LLM traffic shares prefixes, predict what llama.cpp,
vLLM and SGLang would cache, benchmark them, and route between them.

\b
Start with:   kvroute analyze your-log.jsonl --html report.html
No data yet:  kvroute sample sample.jsonl && kvroute analyze sample.jsonl
Engines:      kvroute engines up --engine llamacpp
"""


class _Main(click.Group):
    """Maps :class:`KvrouteError` to one line on stderr and its exit code; never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KvrouteError as exc:
            click.secho(f"error: {exc.message}", fg="red", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            ctx.exit(0)
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


def build_cli() -> click.Group:
    """The ``kvroute`` command group with every subcommand registered."""
    from kvroute.cli.analyze import analyze_cmd, sample_cmd
    from kvroute.cli.engines import engines_group

    group = _Main(
        "kvroute",
        help=HELP,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )
    click.version_option(__version__, prog_name="kvroute")(group)
    for cmd in (analyze_cmd, sample_cmd, engines_group):
        group.add_command(cmd)
    return group


def main() -> None:
    build_cli()(prog_name="kvroute")


if __name__ == "__main__":  # pragma: no cover
    main()
