"""What capture remembers of request bodies: the part of a record a body alone decides
(:class:`BodyPart`), the memo key of a short body (:func:`body_key`, its JSON) and the
last long bodies made (:class:`RecentLongBodies`), which have no key.

A long body (1,024+ characters of messages) is not keyed: keying it would serialise or
hash all of its text on every request, new or not (4 KB of text costs ~1.3 µs to hash,
and each request's strings are new objects, their hashes not cached). Its pieces come
from the piece memo, its block hashes from the prefix memo, and an exact repeat of one
of the last few long bodies is found by comparing: the last message first (what a new
request changes), then the JSON. Not thread-safe: the capture worker owns these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

LONG_MESSAGES_CHARS = 1024
"""Bodies whose messages hold this many characters or more have no memo key."""

RECENT_LONG_BODIES = 4
"""Long bodies kept to serve a repeat (a retry, a client or a load test that sends the
same request again) without tokenizing it."""


class BodyPart:
    """What a body alone decides of its record, and that part's JSON (the object's
    members after its opening brace: ``"turn":0,...,"hashes":[...]}``). A slotted
    class: compiled, it is built without running Python (a named tuple's is not)."""

    __slots__ = ("fields", "json_tail")

    def __init__(self, fields: dict[str, Any], json_tail: bytes) -> None:
        self.fields = fields
        self.json_tail = json_tail


def body_key(body: Mapping[str, Any]) -> bytes | None:
    """The memo key of a body (equal keys, equal records): its JSON; None when it has
    none (not a dict, not JSON, or a long body: see the module doc)."""
    if type(body) is not dict:
        return None
    messages = body.get("messages")
    if type(messages) is list and _text_chars(messages) >= LONG_MESSAGES_CHARS:
        return None
    try:
        return orjson.dumps(body)
    except (TypeError, orjson.JSONEncodeError):
        return None


class _LongBody:
    """A long body made lately."""

    __slots__ = ("body", "json", "last_content", "num_messages", "part")

    def __init__(
        self, body: dict[str, Any], num_messages: int, last_content: object, part: BodyPart
    ) -> None:
        self.body = body
        self.num_messages = num_messages
        self.last_content = last_content
        self.part = part
        self.json: bytes | None = None
        """The body's JSON, once a look-alike needed it."""


class RecentLongBodies:
    """The last :data:`RECENT_LONG_BODIES` long bodies made and their parts, most
    recent first."""

    def __init__(self) -> None:
        self._recent: list[_LongBody] = []

    def __bool__(self) -> bool:
        return bool(self._recent)

    def find(self, body: dict[str, Any]) -> BodyPart | None:
        """The part of a body equal to one kept: compared by their last message's text
        (a new body costs a string comparison per entry), then by their JSON."""
        messages = body.get("messages")
        if type(messages) is not list or not messages:
            return None
        last = _last_content(messages)
        recent = self._recent
        body_json: bytes | None = None
        for j in range(len(recent)):
            entry = recent[j]
            if entry.num_messages != len(messages) or entry.last_content != last:
                continue
            try:
                if body_json is None:
                    body_json = orjson.dumps(body)
                if entry.json is None:
                    entry.json = orjson.dumps(entry.body)
            except (TypeError, orjson.JSONEncodeError):
                return None
            if entry.json == body_json:
                if j:
                    recent.insert(0, recent.pop(j))
                return entry.part
        return None

    def keep(self, body: dict[str, Any], part: BodyPart) -> None:
        """Keep a chat body just made (the oldest kept one goes)."""
        messages = body.get("messages")
        if type(messages) is not list or not messages:
            return
        recent = self._recent
        recent.insert(0, _LongBody(body, len(messages), _last_content(messages), part))
        if len(recent) > RECENT_LONG_BODIES:
            recent.pop()


def _last_content(messages: list[Any]) -> object:
    """The last message's content (None when it is not a dict)."""
    last = messages[-1]
    return last.get("content") if type(last) is dict else None


def _text_chars(messages: list[Any]) -> int:
    """The length of the messages' string contents."""
    total = 0
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        if type(content) is str:
            total += len(content)
    return total
