"""Terminal output that never breaks a value or a label in two.

rich wraps a line at any space, so ``58 min 57 s`` can end a line at ``57`` and a
table squeezed under the terminal's width wraps its cells the same way. Two pieces
keep every value whole:

- :class:`Parts`: a line of ``·``-separated parts that wraps only between parts;
- :class:`Prose`: a sentence that wraps at spaces, but not inside a value (between a
  number and its unit, inside ``2 min 05 s``, around `` / ``);
- :func:`fit_columns`: the columns of a table that fit the terminal, whole, with the
  rest named in a note (``--wide`` prints them all, wider than the terminal).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from kvroute.report.fmt import VALUE_SPACES


class Parts:
    """``parts`` joined by ``sep`` on as few lines as fit; a line breaks only between
    two parts (continuation lines indented by ``indent``). A part wider than the whole
    line is wrapped on its own. Parts are rich markup; ``style`` applies to all."""

    def __init__(
        self, parts: Iterable[str], *, sep: str = " · ", style: str = "", indent: int = 2
    ) -> None:
        self.parts = [p for p in parts if p]
        self.sep = sep
        self.style = style
        self.indent = indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        texts = [Text.from_markup(p, style=self.style) for p in self.parts]
        sep = Text(self.sep, style=self.style)
        line = Text(style=self.style)
        for text in texts:
            if line.cell_len and line.cell_len + sep.cell_len + text.cell_len > width:
                yield line
                line = Text(" " * self.indent, style=self.style)
            elif line.cell_len:
                line.append_text(sep)
            line.append_text(text)
        if line.cell_len:
            yield line


_GLUED = VALUE_SPACES
"""Spaces that are part of a value (shared with the HTML pages)."""


class Prose:
    """``markup`` wrapped to the width at spaces, except the spaces of :data:`_GLUED`
    (a value is never split); continuation lines indented by ``indent``."""

    def __init__(
        self, markup: str, *, style: str = "", indent: int = 0, markup_tags: bool = True
    ) -> None:
        self.markup = markup
        self.style = style
        self.indent = indent
        self.markup_tags = markup_tags
        """False: ``markup`` is plain text (square brackets are kept as they are)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width)
        text = (
            Text.from_markup(self.markup, style=self.style)
            if self.markup_tags
            else Text(self.markup, style=self.style)
        )
        for paragraph in text.split("\n"):
            yield from self._lines(paragraph, width)

    def _lines(self, text: Text, width: int) -> Iterable[Text]:
        plain = text.plain
        glued = {m.start() for m in _GLUED.finditer(plain)}
        spaces = [i for i, ch in enumerate(plain) if ch == " " and i not in glued]
        start, last, pad = 0, None, 0
        for space in [*spaces, len(plain)]:
            if space - start + pad > width and last is not None:
                yield self._line(text, start, last, pad)
                start, last, pad = last + 1, None, self.indent
                if space - start + pad <= width:
                    last = space
                continue
            last = space
        yield self._line(text, start, len(plain), pad)

    def _line(self, text: Text, start: int, end: int, pad: int) -> Text:
        line = Text(" " * pad, style=self.style)
        line.append_text(text[start:end])
        return line


def fit_columns(
    console: Console,
    build: Callable[[Sequence[int]], Table],
    columns: Sequence[int],
    *,
    essential: int,
) -> tuple[Table, list[int]]:
    """The table ``build`` makes of the most of ``columns`` (in order) that fit the
    console whole: the first ``essential`` always, then the others until one does not
    fit. Returns the table and the columns left out."""
    keep = list(columns)
    dropped: list[int] = []
    table = build(keep)
    while len(keep) > essential and natural_width(table) > console.width:
        dropped.insert(0, keep.pop())
        table = build(keep)
    return table, dropped


def natural_width(table: Table) -> int:
    """The cells ``table`` takes unconstrained (rich's own measure leaves out a box's
    padding at the edges, so it reads a few cells short)."""
    wide = Console(width=100_000, file=io.StringIO(), color_system=None, legacy_windows=False)
    with wide.capture() as captured:
        wide.print(table)
    return max((cell_len(line.rstrip()) for line in captured.get().splitlines()), default=0)


def print_wide(console: Console, table: Table) -> None:
    """``table`` at its natural width, past the terminal's if it must (``--wide``):
    every column whole; the terminal wraps the long lines instead of rich the cells."""
    width = console.width
    console.width = max(width, natural_width(table))  # print(width=) cannot go past it
    try:
        console.print(table)
    finally:
        console.width = width


def left_out_note(headers: Sequence[str], width: int, flag: str = "--wide") -> str:
    """The line under a table that left columns out to fit ``width``."""
    return (
        f"[dim]{len(headers)} column{'s' if len(headers) != 1 else ''} left out to fit "
        f"{width} columns: {', '.join(headers)} ({flag} shows them, or widen the terminal)[/]"
    )
