"""What kind of content breaks a shared prefix, told from the varying text itself.

:mod:`kvroute.analyze.breakers` finds *where* prompts that are otherwise equal differ;
this module names *what* differs (a timestamp, a uuid, a per-user name ...) and says
how to fix it. Pure: text in, a kind out.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence


class BreakerKind(enum.Enum):
    TIMESTAMP = "timestamp"
    DATE = "date"
    UUID = "uuid"
    REQUEST_ID = "request_id"
    PER_USER_FIELD = "per_user_field"
    KEY_ORDER = "json_key_order"
    TOOL_ORDER = "tool_order"
    WHITESPACE = "whitespace"
    TOOL_SCHEMA_VERSION = "tool_schema_version"
    VARYING_FIELD = "varying_field"


_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DAY = r"(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*"
# Ordered: the first pattern a value matches names it (a datetime contains a date, a uuid
# looks like an id).
_PATTERNS: tuple[tuple[BreakerKind, re.Pattern[str]], ...] = (
    (
        BreakerKind.UUID,
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    ),
    (
        BreakerKind.TIMESTAMP,
        re.compile(
            r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}|\b\d{1,2}:\d{2}(?::\d{2})?\b|\b1\d{9}(?:\.\d+)?\b"
            r"|\b1\d{12}\b",
            re.I,
        ),
    ),
    (
        BreakerKind.DATE,
        re.compile(
            rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}/\d{{1,2}}/\d{{2,4}}\b"
            rf"|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b|\b\d{{1,2}}\s+{_MONTH}\s+\d{{4}}\b"
            rf"|\b{_DAY}\b",
            re.I,
        ),
    ),
    (
        BreakerKind.REQUEST_ID,
        re.compile(
            r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b|\b\d{5,}\b"
            r"|\b[a-z]+[-_](?=[a-z0-9]*\d)[a-z0-9]{4,}\b",
            re.I,
        ),
    ),
)
_NAME_LIKE = re.compile(r"^[^\W\d_][\w' .-]*$")


Span = tuple[str, str, str]
"""A varying span with the text on either side: (before, varying, after)."""


def _hits(pattern: re.Pattern[str], spans: Sequence[Span]) -> bool:
    """Whether ``pattern`` matches text that overlaps a varying span (a date of which
    only the day varies is still a date; a constant date next to a name is not)."""
    for before, slot, after in spans:
        lo, hi = len(before), len(before) + len(slot)
        for m in pattern.finditer(before + slot + after):
            if m.start() < hi and m.end() > lo:
                return True
    return False


def classify_values(
    variants: Sequence[Sequence[Span]],
    *,
    in_tools: bool,
    per_user: bool | None,
    num_requests: int,
) -> BreakerKind:
    """The kind of what varies: ``variants`` holds, per distinct prompt variant, its
    varying spans in context.

    ``per_user`` says whether each user sent one variant and users differ (``None``: the
    trace has no user ids). A pattern names the kind when it matches at least half the
    variants, so one odd value does not change the answer.
    """
    if not variants:
        return BreakerKind.VARYING_FIELD
    half = (len(variants) + 1) // 2
    for kind, pattern in _PATTERNS:
        if sum(1 for spans in variants if _hits(pattern, spans)) >= half:
            return kind
    if in_tools:
        # Varying text inside tool definitions is a schema edit (a description, a
        # parameter), whether or not it carries a version number.
        return BreakerKind.TOOL_SCHEMA_VERSION
    if per_user:
        return BreakerKind.PER_USER_FIELD
    # Without user ids: short name-like values that repeat across requests are a
    # per-user field (a user sends several requests); one-off values are not.
    values = [" ".join(s for _, s, _ in spans).strip() for spans in variants]
    repeats = len(values) * 2 <= num_requests
    if per_user is None and repeats and all(_NAME_LIKE.match(v) for v in values):
        return BreakerKind.PER_USER_FIELD
    return BreakerKind.VARYING_FIELD


_FIXES: dict[BreakerKind, str] = {
    BreakerKind.TIMESTAMP: "move the timestamp after the shared part (the end of the prompt or "
    "the last user message), or round it to what the model needs (the day)",
    BreakerKind.DATE: "move the date after the shared part (the end of the prompt or the last "
    "user message)",
    BreakerKind.UUID: "keep request ids out of the prompt (send them as request metadata), or "
    "append them after the shared part",
    BreakerKind.REQUEST_ID: "keep request/trace ids out of the prompt (send them as request "
    "metadata), or append them after the shared part",
    BreakerKind.PER_USER_FIELD: "keep {field} identical for every user and put the per-user "
    "fields (name, plan, ...) after the shared instructions",
    BreakerKind.KEY_ORDER: "serialize JSON with a fixed key order (json.dumps(..., "
    "sort_keys=True)) so the same object always renders the same text",
    BreakerKind.TOOL_ORDER: "send the tool list in one fixed order (for example sorted by name)",
    BreakerKind.WHITESPACE: "render {field} with one template for every client: the same "
    "spaces, line endings and blank lines",
    BreakerKind.TOOL_SCHEMA_VERSION: "pin one tool schema version per deployment and keep "
    "per-request text out of tool definitions",
    BreakerKind.VARYING_FIELD: "move the varying text after the shared part of {field}",
}


def suggested_fix(kind: BreakerKind, field: str) -> str:
    """One sentence: what to change in the application so the prefix is shared."""
    return _FIXES[kind].format(field=field)
