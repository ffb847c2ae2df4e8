"""Escaping of untrusted text for HTML and SVG (XML) output."""

from __future__ import annotations

import html
import re

from kvroute.report.fmt import VALUE_SPACES

# Characters XML 1.0 forbids outright; html.escape keeps them, which would make an SVG
# chart unparseable, so they are dropped.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def prose(text: str) -> str:
    """:func:`escape`, with the spaces inside values made non-breaking, so a browser
    never wraps ``40.0`` from its ``%``."""
    return VALUE_SPACES.sub("\u00a0", escape(text))


def escape(text: str) -> str:
    """``text`` safe as HTML/XML character data and inside double- or single-quoted attributes.

    Escapes ``& < > " '`` and drops control characters that XML 1.0 does not allow.
    """
    return html.escape(_XML_FORBIDDEN.sub("", text), quote=True)
