"""Escaping: untrusted text stays text in HTML and SVG, and a value never wraps from its unit."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kvroute.report.page.escape import escape, prose


def test_markup_and_both_quote_kinds_are_escaped() -> None:
    assert escape("<b>\"x\" & 'y'</b>") == "&lt;b&gt;&quot;x&quot; &amp; &#x27;y&#x27;&lt;/b&gt;"


@pytest.mark.parametrize("bad", ["\x00", "\x08", "\x0b", "\x1f", "\ufffe"])
def test_characters_xml_forbids_are_dropped_so_an_svg_still_parses(bad: str) -> None:
    text = f"a{bad}b"
    assert escape(text) == "ab"
    ET.fromstring(f'<svg title="{escape(text)}">{escape(text)}</svg>')  # raises if unparseable


def test_tabs_and_newlines_are_kept() -> None:
    assert escape("a\tb\nc\r") == "a\tb\nc\r"


def test_prose_never_breaks_a_value_from_its_unit() -> None:
    assert prose("between 40.0 % and 60.0 %, wait 2 min 05 s, +4.6 pp <x>") == (
        "between 40.0\xa0% and 60.0\xa0%, wait 2\xa0min\xa005\xa0s, +4.6\xa0pp &lt;x&gt;"
    )
    assert prose("3 sessions and 12 turns") == "3 sessions and 12 turns"  # words break
    assert prose("p50 / p90 at 93.1 ms") == "p50\xa0/\xa0p90 at 93.1\xa0ms"
