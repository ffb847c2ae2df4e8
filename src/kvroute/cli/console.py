"""The one place CLI commands get a rich :class:`~rich.console.Console`.

Off a terminal (piped, redirected, captured) rich lays tables out at 80 columns and cuts
the cells that do not fit. Commands' consoles there take ``COLUMNS`` when it is set and
otherwise :data:`PIPE_WIDTH`, wide enough for every table kvroute prints.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

PIPE_WIDTH = 160


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own handling exits with status 1; let the BrokenPipeError reach
        # kvroute.cli.main, which ends every command the same way when stdout is closed.
        raise BrokenPipeError


def make_console(**kwargs: Any) -> Console:
    """A :class:`Console` with ``kwargs``, :data:`PIPE_WIDTH` wide off a terminal; a
    write to a closed pipe raises :class:`BrokenPipeError` (rich would exit)."""
    console = _Console(**kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console
