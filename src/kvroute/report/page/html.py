"""Report pages: a small block model and its rendering to one self-contained HTML5 file.

A :class:`Page` holds :class:`Section` s of blocks (paragraphs, key/value lists, tables,
charts, callouts, definition lists, code). :func:`render_page` turns it into a single
document with embedded CSS, a table of contents and a footer; it needs no network (a
Content-Security-Policy forbids fetching anything) and no JavaScript. Every string from
the model is HTML-escaped, except :attr:`Chart.svg`, which is trusted markup produced by
:mod:`kvroute.report.charts.svg`. Rendering is pure: the timestamp is passed in.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kvroute import __version__
from kvroute.output_file import write_output
from kvroute.report.page.escape import escape, prose
from kvroute.report.page.style import STYLESHEET


class CalloutKind(enum.Enum):
    """The tone of a :class:`Callout`."""

    INFO = "info"
    GOOD = "good"
    WARN = "warn"

    @property
    def icon(self) -> str:
        """A one-character badge shown beside the callout's title."""
        return {"info": "i", "good": "✓", "warn": "!"}[self.value]


class Align(enum.Enum):
    """Horizontal alignment of a table column."""

    LEFT = "l"
    RIGHT = "r"
    CENTER = "c"


@dataclass(frozen=True, slots=True)
class Paragraph:
    text: str


@dataclass(frozen=True, slots=True)
class KeyValues:
    """A two-column list of labelled values (a summary box)."""

    rows: Sequence[tuple[str, str]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))


@dataclass(frozen=True, slots=True)
class Table:
    """A table of pre-formatted cells; every row has ``len(headers)`` cells.

    ``align`` gives one :class:`Align` per column; when empty, columns whose cells all look
    like formatted numbers (``"12.3k"``, ``"61.2 %"``, ``"45 ms"``) are right-aligned.
    Raises ``ValueError`` on a row or ``align`` of the wrong length.
    """

    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    caption: str | None = None
    align: Sequence[Align] = ()

    def __post_init__(self) -> None:
        width = len(self.headers)
        for i, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"table row {i} has {len(row)} cells, expected {width}")
        if self.align and len(self.align) != width:
            raise ValueError(f"align has {len(self.align)} entries for {width} columns")
        object.__setattr__(self, "headers", tuple(self.headers))
        object.__setattr__(self, "rows", tuple(tuple(row) for row in self.rows))
        object.__setattr__(self, "align", tuple(self.align))


@dataclass(frozen=True, slots=True)
class Chart:
    """An inline chart. ``svg`` is inserted verbatim, so it must come from
    :mod:`kvroute.report.charts.svg` (never from user text); raises ``ValueError`` unless it is
    an ``<svg>`` element."""

    svg: str
    caption: str | None = None

    def __post_init__(self) -> None:
        if not (self.svg.lstrip().startswith("<svg") and self.svg.rstrip().endswith("</svg>")):
            raise ValueError("Chart.svg must be one <svg> element from kvroute.report.charts.svg")


@dataclass(frozen=True, slots=True)
class Callout:
    """A highlighted box for a verdict or warning."""

    kind: CalloutKind
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class DefinitionList:
    """Terms and their definitions (a glossary)."""

    items: Sequence[tuple[str, str]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))


@dataclass(frozen=True, slots=True)
class Code:
    """Preformatted text, shown as is (a generated config, a command line)."""

    text: str


Block = Paragraph | KeyValues | Table | Chart | Callout | DefinitionList | Code


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    blocks: Sequence[Block]

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))


@dataclass(frozen=True, slots=True)
class Page:
    """A whole report. ``lead`` blocks (a verdict, a summary) come before the contents list;
    ``generated_at`` and ``generator``/``version`` go in the footer."""

    title: str
    sections: Sequence[Section]
    generated_at: datetime
    subtitle: str | None = None
    lead: Sequence[Block] = ()
    generator: str = "kvroute"
    version: str = __version__

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", tuple(self.sections))
        object.__setattr__(self, "lead", tuple(self.lead))


_NUMBER_CELL = re.compile(r"[-+−]?[\d.,]+\s?(%|[A-Za-zµ/]{1,4})?")
_NEUTRAL_CELLS = frozenset({"", "-", "—", "n/a", "∞", "-∞"})

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _anchors(titles: Sequence[str]) -> list[str]:
    """A unique ``id`` per section title, readable where the title allows."""
    seen: set[str] = set()
    anchors = []
    for index, title in enumerate(titles, start=1):
        base = re.sub(r"[^\w]+", "-", title.lower()).strip("-_") or f"section-{index}"
        anchor, n = base, 2
        while anchor in seen:
            anchor, n = f"{base}-{n}", n + 1
        seen.add(anchor)
        anchors.append(anchor)
    return anchors


def _is_number_column(cells: Sequence[str]) -> bool:
    values = [cell.strip() for cell in cells if cell.strip() not in _NEUTRAL_CELLS]
    return bool(values) and all(_NUMBER_CELL.fullmatch(v) for v in values)


def _column_classes(table: Table) -> list[str]:
    if table.align:
        return [align.value for align in table.align]
    columns = zip(*table.rows, strict=True) if table.rows else ()
    return ["r" if _is_number_column(column) else "l" for column in columns] or [
        "l" for _ in table.headers
    ]


def _table(table: Table) -> str:
    classes = _column_classes(table)
    head = "".join(
        f'<th class="{c}" scope="col">{escape(h)}</th>'
        for h, c in zip(table.headers, classes, strict=True)
    )
    body = [
        "<tr>"
        + "".join(f'<td class="{c}">{escape(v)}</td>' for v, c in zip(row, classes, strict=True))
        + "</tr>"
        for row in table.rows
    ] or [f'<tr><td class="empty" colspan="{max(1, len(table.headers))}">no rows</td></tr>']
    caption = f"<caption>{escape(table.caption)}</caption>" if table.caption else ""
    return (
        f'<div class="table-wrap"><table>{caption}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _pairs(rows: Sequence[tuple[str, str]]) -> str:
    return "".join(
        f'<tr><th scope="row">{escape(k)}</th><td>{escape(v)}</td></tr>' for k, v in rows
    )


def render_block(block: Block) -> str:
    """One block as an HTML fragment. Raises ``TypeError`` for an unknown block type."""
    match block:
        case Paragraph(text=text):
            return f"<p>{prose(text)}</p>"
        case KeyValues(rows=rows):
            return f'<table class="kv"><tbody>{_pairs(rows)}</tbody></table>'
        case Table():
            return _table(block)
        case Chart(svg=svg, caption=caption):
            figcaption = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
            return f"<figure>{svg}{figcaption}</figure>"
        case Callout(kind=kind, title=title, text=text):
            return (
                f'<div class="callout {kind.value}" role="note">'
                f'<div class="icon" aria-hidden="true">{kind.icon}</div><div>'
                f'<p class="title">{escape(title)}</p><p>{prose(text)}</p></div></div>'
            )
        case DefinitionList(items=items):
            entries = "".join(f"<dt>{escape(t)}</dt><dd>{prose(d)}</dd>" for t, d in items)
            return f"<dl>{entries}</dl>"
        case Code(text=text):
            return f"<pre><code>{escape(text)}</code></pre>"
    raise TypeError(f"not a report block: {type(block).__name__}")


def render_page(page: Page) -> str:
    """The whole page as one self-contained HTML5 document (no external resources, no JS).

    Each section gets a unique ``id`` linked from the table of contents, which is left out
    when there are no sections. Raises ``TypeError`` if a block is not a known type.
    """
    anchors = _anchors([s.title for s in page.sections])
    toc = "".join(
        f'<li><a href="#{escape(a)}">{escape(s.title)}</a></li>'
        for a, s in zip(anchors, page.sections, strict=True)
    )
    nav = (
        f'<nav class="toc" aria-label="Contents"><h2>Contents</h2><ol>{toc}</ol></nav>'
        if page.sections
        else ""
    )
    sections = "\n".join(
        f'<section id="{escape(a)}"><h2>{escape(s.title)}</h2>\n'
        + "\n".join(render_block(b) for b in s.blocks)
        + "\n</section>"
        for a, s in zip(anchors, page.sections, strict=True)
    )
    lead = "\n".join(render_block(b) for b in page.lead)
    subtitle = f'<p class="subtitle">{escape(page.subtitle)}</p>' if page.subtitle else ""
    made_by = escape(f"{page.generator} {page.version}".strip())
    stamp = page.generated_at.isoformat(sep=" ", timespec="seconds")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="generator" content="{made_by}">
<title>{escape(page.title)}</title>
<style>{STYLESHEET}</style>
</head>
<body>
<div class="page">
<header><h1>{escape(page.title)}</h1>{subtitle}</header>
<main>
{lead}
{nav}
{sections}
</main>
<footer>Generated by {made_by} at <time datetime="{escape(page.generated_at.isoformat())}">\
{escape(stamp)}</time></footer>
</div>
</body>
</html>
"""


def write_page(page: Page, path: str | os.PathLike[str]) -> None:
    """Render ``page`` and write it to ``path`` with
    :func:`kvroute.output_file.write_output`.

    The page is rendered before any file is touched; ``path`` then holds either its old
    content or the complete new page, never a partial one, and keeps its permission bits
    (a new file gets 0o644). A link, FIFO or device at ``path`` stays one.
    """
    write_output(path, render_page(page).encode("utf-8"))
