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


def make_console(**kwargs: Any) -> Console:
    """A :class:`Console` with ``kwargs``, :data:`PIPE_WIDTH` wide off a terminal."""
    console = Console(**kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console
