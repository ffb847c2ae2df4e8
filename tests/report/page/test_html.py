"""HTML pages: every section linked from the TOC, all text escaped, nothing external,
atomic writes."""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import cast

import pytest

from kvroute.report.charts.svg import Series, bar_chart, line_chart
from kvroute.report.page.html import (
    Align,
    Block,
    Callout,
    CalloutKind,
    Chart,
    Code,
    DefinitionList,
    KeyValues,
    Page,
    Paragraph,
    Section,
    Table,
    render_block,
    render_page,
    write_page,
)

HOSTILE = "<script>alert('x')</script> & \"q\""
WHEN = datetime(2024, 6, 8, 9, 30, tzinfo=UTC)
VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "source", "wbr"}


class _Collector(HTMLParser):
    """Ids, in-page links, tag balance and visible text of a document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.urls: list[str] = []
        self.stack: list[str] = []
        self.unbalanced: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if values.get("id"):
            self.ids.append(cast(str, values["id"]))
        if tag == "a" and values.get("href"):
            self.hrefs.append(cast(str, values["href"]))
        self.urls += [v for k, v in attrs if k in {"src", "href", "xlink:href"} and v]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v for k, v in attrs if k in {"src", "href", "xlink:href"} and v]

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        else:
            self.unbalanced.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def collect(document: str) -> _Collector:
    parser = _Collector()
    parser.feed(document)
    parser.close()
    return parser


def demo_page(**changes: object) -> Page:
    chart = line_chart(
        [Series("s", [1, 2, 3], [1, 4, 9])], title="Growth", x_label="x", y_label="y"
    )
    bars = bar_chart(["a", "b"], [1, 2], title="Bars", x_label="k", y_label="n")
    fields: dict[str, object] = {
        "title": "kvroute analyze",
        "subtitle": "trace.jsonl",
        "generated_at": WHEN,
        "lead": [Callout(CalloutKind.GOOD, "Verdict", "SGLang fits.")],
        "sections": [
            Section("Overview", [Paragraph("Hello."), KeyValues([("requests", "12,345")])]),
            Section("Charts", [Chart(chart, "A line."), Chart(bars)]),
            Section("Numbers", [Table(["engine", "hit"], [["vLLM", "58.1 %"]], caption="c")]),
            Section("Config", [Code("routes: []\n")]),
            Section("Glossary", [DefinitionList([("TTFT", "time to first token")])]),
        ],
    }
    fields.update(changes)
    return Page(**fields)  # type: ignore[arg-type]


def test_document_shape_and_balance() -> None:
    document = render_page(demo_page())
    assert document.startswith('<!DOCTYPE html>\n<html lang="en">')
    parsed = collect(document)
    assert parsed.stack == [] and parsed.unbalanced == []
    assert '<meta charset="utf-8">' in document
    assert "<style>" in document


def test_every_section_has_title_and_toc_anchor() -> None:
    page = demo_page()
    document = render_page(page)
    parsed = collect(document)
    assert len(set(parsed.ids)) == len(parsed.ids)
    toc_targets = [h[1:] for h in parsed.hrefs if h.startswith("#")]
    assert len(toc_targets) == len(page.sections)
    for section, target in zip(page.sections, toc_targets, strict=True):
        assert target in parsed.ids
        match = re.search(rf'<section id="{re.escape(target)}"><h2>([^<]*)</h2>', document)
        assert match is not None and match.group(1) == section.title
        assert f'<a href="#{target}">{section.title}</a>' in document


def test_duplicate_and_symbol_only_titles_get_unique_anchors() -> None:
    page = demo_page(sections=[Section("Same", []), Section("Same", []), Section("!!!", [])])
    parsed = collect(render_page(page))
    targets = [h[1:] for h in parsed.hrefs]
    assert len(set(targets)) == 3 and set(targets) <= set(parsed.ids)


def test_no_sections_means_no_toc() -> None:
    document = render_page(demo_page(sections=[]))
    assert "<nav" not in document


def test_no_external_resources_and_no_script() -> None:
    document = render_page(demo_page())
    parsed = collect(document)
    assert all(url.startswith("#") for url in parsed.urls), parsed.urls
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", document)
    assert not re.search(r"url\(\s*[\"']?(?:https?:)?//", document)
    assert "@import" not in document
    assert "script" not in parsed.tags and "link" not in parsed.tags
    assert "default-src 'none'" in document  # the CSP forbids fetching anything


def test_footer_names_generator_version_and_given_time() -> None:
    document = render_page(demo_page(generator="kvroute-test", version="9.9"))
    footer = re.search(r"<footer>(.*?)</footer>", document, re.S)
    assert footer is not None
    assert "kvroute-test 9.9" in footer.group(1)
    assert "2024-06-08 09:30:00+00:00" in footer.group(1)
    assert render_page(demo_page()) == render_page(demo_page())  # no clock inside


def test_hostile_text_is_escaped_in_every_block() -> None:
    blocks: list[Block] = [
        Paragraph(HOSTILE),
        KeyValues([(HOSTILE, HOSTILE)]),
        Table([HOSTILE], [[HOSTILE]], caption=HOSTILE),
        Chart(bar_chart([HOSTILE], [1], title=HOSTILE, x_label="x", y_label="y"), HOSTILE),
        Callout(CalloutKind.WARN, HOSTILE, HOSTILE),
        DefinitionList([(HOSTILE, HOSTILE)]),
        Code(HOSTILE),
    ]
    page = demo_page(
        title=HOSTILE,
        subtitle=HOSTILE,
        generator=HOSTILE,
        sections=[Section(HOSTILE, blocks)],
        lead=[Paragraph(HOSTILE)],
    )
    document = render_page(page)
    assert "<script" not in document
    assert "'x'" not in document and '"q"' not in document
    parsed = collect(document)
    assert parsed.stack == [] and parsed.unbalanced == []
    visible = "".join(parsed.text)
    assert visible.count("<script>alert('x')</script>") >= 12


def test_charts_stay_valid_xml_inside_the_page() -> None:
    document = render_page(demo_page())
    svgs = re.findall(r"<svg.*?</svg>", document, re.S)
    assert len(svgs) == 2
    for svg in svgs:
        ET.fromstring(svg)


def test_chart_rejects_non_svg_markup() -> None:
    with pytest.raises(ValueError, match="svg"):
        Chart("<b>not a chart</b>")


def test_table_validation_and_alignment() -> None:
    with pytest.raises(ValueError, match="row 0"):
        Table(["a", "b"], [["only one"]])
    with pytest.raises(ValueError, match="align"):
        Table(["a"], [["1"]], align=[Align.LEFT, Align.RIGHT])
    auto = render_block(
        Table(
            ["engine", "hit", "ttft", "note"],
            [["vLLM", "58.1 %", "45 ms", "fast"], ["SGLang", "n/a", "1.23 s", "ok"]],
        )
    )
    assert re.findall(r'<th class="(\w)"', auto) == ["l", "r", "r", "l"]
    explicit = render_block(Table(["a"], [["1"]], align=[Align.CENTER]))
    assert '<td class="c">1</td>' in explicit
    assert "no rows" in render_block(Table(["a", "b"], []))


def test_unknown_block_type_raises() -> None:
    with pytest.raises(TypeError, match="not a report block"):
        render_block(cast(Block, "just a string"))


def test_write_page_writes_complete_document(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    write_page(demo_page(), target)
    assert target.read_text(encoding="utf-8") == render_page(demo_page())
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["report.html"]


def test_write_page_keeps_old_file_when_rendering_raises(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old report", encoding="utf-8")
    broken = demo_page(sections=[Section("Broken", [cast(Block, object())])])
    with pytest.raises(TypeError):
        write_page(broken, target)
    assert target.read_text(encoding="utf-8") == "old report"
    assert os.listdir(tmp_path) == ["report.html"]


def test_write_page_keeps_old_file_when_replace_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.html"
    target.write_text("old report", encoding="utf-8")
    target.chmod(0o600)

    def fail(src: str, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_page(demo_page(), target)
    assert target.read_text(encoding="utf-8") == "old report"
    assert os.listdir(tmp_path) == ["report.html"]  # the temporary file is cleaned up
    monkeypatch.undo()
    write_page(demo_page(), target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # permissions survive a rewrite
