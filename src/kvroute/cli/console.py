"""The one place CLI commands get a rich :class:`~rich.console.Console`.

Off a terminal (piped, redirected, captured) rich lays tables out at 80 columns and cuts
the cells that do not fit. Commands' consoles there take ``COLUMNS`` when it is set and
otherwise :data:`PIPE_WIDTH`, wide enough for every table kvroute prints.

Lines of text printed through it wrap as :class:`~kvroute.report.console_fit.Prose`:
at spaces, but never inside a value (``29.4 %``, ``58 min 57 s``).
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

from kvroute.report.console_fit import Prose

PIPE_WIDTH = 160


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own handling exits with status 1; let the BrokenPipeError reach
        # kvroute.cli.main, which ends every command the same way when stdout is closed.
        raise BrokenPipeError

    def print(self, *objects: Any, **kwargs: Any) -> None:
        # Plain strings (rich markup) become Prose, so no value wraps in two; anything
        # with its own layout (tables, panels, soft-wrapped or styled text) is rich's.
        if objects and all(isinstance(o, str) for o in objects) and not kwargs:
            objects = (Prose(" ".join(objects)),)
        super().print(*objects, **kwargs)


def make_console(**kwargs: Any) -> Console:
    """A :class:`Console` with ``kwargs``, :data:`PIPE_WIDTH` wide off a terminal; a
    write to a closed pipe raises :class:`BrokenPipeError` (rich would exit)."""
    console = _Console(**kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console
