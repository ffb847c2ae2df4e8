"""Capture's records: what the request path hands over (:class:`CaptureEvent`, a tuple
of references) and the kvroute trace record each event becomes on the worker thread
(tokenized, hashed in one vectorised pass per batch reusing the hashes of prefixes
seen before: capture_hashes.py, session ids pseudonymised, no text unless asked).
Pure apart from the memos; :mod:`kvroute.gateway.capture.worker` runs the worker and the
files.

A record is the event's fields (times, status, session, model, usage, class, backend)
followed by what the body alone decides (turn, messages, tools, structured output,
the prompt's length and block hashes, its text when asked), encoded by
:mod:`kvroute.trace.writer` (the one record encoder, also ``kvroute export``'s).
:class:`CaptureRecords` memoises the second part by the body's JSON, so a short body
seen before (a retry, a client that repeats its prompt) costs a dictionary lookup: no
tokenizing, no hashing, no JSON for its hashes. Long bodies (1,024+ characters of
messages) have no key: a repeat of one of the last few is found by comparison, others
are left to the piece and prefix memos (:mod:`kvroute.gateway.capture.bodies`). The
line written is the event part's JSON joined to the body part's, byte for byte what
serialising the whole record gives.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from kvroute.errors import KvrouteError
from kvroute.gateway.capture.attrs import attr_fields
from kvroute.gateway.capture.bodies import BodyPart, RecentLongBodies, body_key
from kvroute.gateway.capture.hashes import PrefixHasher, packed
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.formats.base import RecordError
from kvroute.trace.hashing import keyed_values
from kvroute.trace.writer import prompt_json, record_line, request_fields
from kvroute.types import TokenIds


class CaptureEvent(NamedTuple):
    """One forwarded request, as the request path hands it over (built from its
    :class:`~kvroute.gateway.outcome.Outcome`): a tuple of references."""

    body: Mapping[str, Any]
    arrival_unix_s: float
    end_unix_s: float
    session_id: str | None
    model: str
    workload: str | None
    backend: str
    status: int
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    token_ids: tuple[str, TokenIds] | None = None
    """(tokenizer name, the prompt's ids) when the route tokenized it already
    (cache_aware): capture does not tokenize again if its tokenizer has that name."""
    observe: bool = False
    """Hand the record to the capture's ``on_records`` (the live traffic window takes
    its prompt blocks from capture when the route did not tokenize)."""


class CaptureRecords:
    """Events → trace record lines, a batch at a time, with a memo of body parts
    (least recently used first out, at most ``max_bodies`` bodies and about
    ``max_memo_bytes``). A body enters the memo the second time it is seen: the
    first time only its key's hash is kept, so traffic that never repeats a body
    does not churn the memo. Not thread-safe: the capture worker owns it."""

    def __init__(
        self,
        prompts: PromptTokens,
        *,
        block_size_tokens: int,
        include_text: bool,
        key: bytes | None = None,
        max_bodies: int = 4096,
        max_memo_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self.prompts = prompts
        self.key = key
        """The trace key: the hashes written go through
        :func:`~kvroute.trace.hashing.keyed_hashes` with it (None: written as they are)."""
        self.block_size_tokens = block_size_tokens
        self.include_text = include_text
        self.max_bodies = max_bodies
        self.max_memo_bytes = max_memo_bytes
        self.num_body_hits = 0
        self.num_body_misses = 0
        self._memo: OrderedDict[bytes, BodyPart] = OrderedDict()
        self._memo_bytes = 0
        self._seen_once: set[int] = set()  # hash() of keys seen once (a collision only
        # lets a body into the memo early: the memo itself compares whole keys)
        self._pseudonyms: dict[str, str] = {}
        self._hasher = PrefixHasher(
            block_size_tokens, render=orjson.dumps if key is None else self._keyed_json
        )
        self._recent_long = RecentLongBodies()
        """The last long bodies made (they have no memo key)."""

    def render(
        self, events: Sequence[CaptureEvent], *, observed: bool = False
    ) -> tuple[list[bytes | Exception], list[dict[str, Any]]]:
        """Each event's JSON line (no line end), or why it has none (a body the trace
        cannot hold: :class:`RecordError`; a prompt that cannot be tokenized:
        :class:`KvrouteError`); and, when ``observed``, the records of the events
        marked ``observe``, with the gateway's own (unkeyed) hashes, the keys the
        traffic window compares with its routes'. Records share the memo's lists: read
        them, never change them."""
        parts = self._body_parts(events)
        lines: list[bytes | Exception] = []
        records: list[dict[str, Any]] = []
        for event, part in zip(events, parts, strict=True):
            if isinstance(part, Exception):
                lines.append(part)
                continue
            head = self._event_fields(event)
            lines.append(record_line(head, part.json_tail))
            if observed and event.observe:
                records.append(head | part.fields)
        return lines, records

    def records(self, events: Sequence[CaptureEvent]) -> list[dict[str, Any] | Exception]:
        """Each event's whole record as :meth:`render` writes it (hashes keyed when
        there is a key), or why it has none."""
        parts = self._body_parts(events)
        out: list[dict[str, Any] | Exception] = []
        for e, p in zip(events, parts, strict=True):
            if isinstance(p, Exception):
                out.append(p)
                continue
            rec = self._event_fields(e) | p.fields
            if self.key is not None:
                rec["hashes"] = keyed_values(rec["hashes"], self.key)
            out.append(rec)
        return out

    def _keyed_json(self, hashes: list[int]) -> bytes:
        assert self.key is not None
        return orjson.dumps(keyed_values(hashes, self.key))

    def _body_parts(self, events: Sequence[CaptureEvent]) -> list[BodyPart | Exception]:
        """Each event's body part, from the memo or made now (new bodies tokenized one
        by one, hashed together)."""
        memo = self._memo
        out: list[BodyPart | Exception | None] = []
        new: dict[bytes, int] = {}  # memo key -> index in ``made``
        made: list[tuple[bytes | None, dict[str, Any], bytes]] = []
        waiting: list[tuple[int, int]] = []  # (event index, index in ``made``)
        repeated: set[int] = set()  # indices in ``made`` of bodies seen twice here
        made_at: list[int] = []  # the event index of each body in ``made``
        for i, event in enumerate(events):
            body = event.body
            key = body_key(body)
            if key is None and type(body) is dict and self._recent_long:
                found = self._recent_long.find(body)
                if found is not None:
                    self.num_body_hits += 1
                    out.append(found)
                    continue
            if key is not None:
                part = memo.get(key)
                if part is not None:
                    self.num_body_hits += 1
                    memo.move_to_end(key)
                    out.append(part)
                    continue
                j = new.get(key)
                if j is not None:  # the same new body earlier in this batch
                    self.num_body_hits += 1
                    repeated.add(j)
                    waiting.append((i, j))
                    out.append(None)
                    continue
            self.num_body_misses += 1
            try:
                fields, ids = self._body_fields(event)
            except (RecordError, KvrouteError) as exc:
                out.append(exc)
                continue
            if key is not None:
                new[key] = len(made)
            made_at.append(i)
            waiting.append((i, len(made)))
            made.append((key, fields, ids))
            out.append(None)
        hashes = self._hasher.hashes_json([ids for _, _, ids in made])
        parts: list[BodyPart] = []
        for j, ((key, fields, ids), (h, h_json)) in enumerate(zip(made, hashes, strict=True)):
            tail = prompt_json(fields, len(ids) >> 2, h_json)  # 4 bytes an id
            fields["hashes"] = h
            part = BodyPart(fields, tail)
            parts.append(part)
            if key is not None:
                self._remember(key, part, seen_twice=j in repeated)
            elif type(body := events[made_at[j]].body) is dict:
                self._recent_long.keep(body, part)
        for i, j in waiting:
            out[i] = parts[j]
        return out  # type: ignore[return-value]

    def _body_fields(self, event: CaptureEvent) -> tuple[dict[str, Any], bytes]:
        """A new body's part without its length and hashes, and its token ids packed
        as native uint32 (what the prefix hasher reads cheapest)."""
        body, prompts, include_text = event.body, self.prompts, self.include_text
        fields, token_prompt = attr_fields(body)
        text = ""
        if token_prompt is not None:
            token_ids = packed(token_prompt.token_ids)
        else:
            routed = event.token_ids
            if routed is not None and routed[0] == prompts.tokenizer.name:
                ids: bytes | None = packed(routed[1])
            else:
                ids = prompts.packed_ids(body)
            if ids is None or include_text:
                text = prompts.text(body) or ""  # raises what stopped the tokenizing
            token_ids = packed(prompts.encode(text)) if ids is None else ids
        if include_text and text:
            fields["prompt_text"] = text
        return fields, token_ids

    def _event_fields(self, event: CaptureEvent) -> dict[str, Any]:
        """The event's part of its record (:func:`~kvroute.trace.writer.request_fields`)."""
        session = event.session_id
        return request_fields(
            _to_micros(event.arrival_unix_s),
            _to_micros(event.end_unix_s),
            event.status,
            self._pseudonym(session) if session else None,
            None,
            event.model or None,
            event.completion_tokens,
            event.workload,
            event.backend or None,
            event.cached_tokens,
            event.prompt_tokens,
        )

    def _remember(self, key: bytes, part: BodyPart, *, seen_twice: bool) -> None:
        seen = self._seen_once
        key_hash = hash(key)
        if key_hash not in seen and not seen_twice:
            if len(seen) >= 65_536:
                seen.clear()  # a bound: a body that recurs is seen again
            seen.add(key_hash)
            return
        seen.discard(key_hash)
        memo = self._memo
        memo[key] = part
        self._memo_bytes += _entry_bytes(key, part)
        while memo and (len(memo) > self.max_bodies or self._memo_bytes > self.max_memo_bytes):
            old_key, old = memo.popitem(last=False)
            self._memo_bytes -= _entry_bytes(old_key, old)

    def _pseudonym(self, session_id: str) -> str:
        found = self._pseudonyms.get(session_id)
        if found is None:
            if len(self._pseudonyms) >= 65_536:
                self._pseudonyms.clear()  # a bound: active sessions refill it
            found = self._pseudonyms[session_id] = _pseudonym(session_id)
        return found


def capture_records(
    events: Sequence[CaptureEvent],
    prompts: PromptTokens,
    *,
    block_size_tokens: int,
    include_text: bool,
    key: bytes | None = None,
) -> list[dict[str, Any] | Exception]:
    """The trace record of each event, or why it has none (see
    :meth:`CaptureRecords.render`), with a memo for this call only."""
    made = CaptureRecords(
        prompts, block_size_tokens=block_size_tokens, include_text=include_text, key=key
    )
    return made.records(events)


def capture_record(
    event: CaptureEvent, prompts: PromptTokens, *, block_size_tokens: int, include_text: bool
) -> dict[str, Any]:
    """:func:`capture_records` for one event; raises instead of returning the error."""
    [rec] = capture_records(
        [event], prompts, block_size_tokens=block_size_tokens, include_text=include_text
    )
    if isinstance(rec, Exception):
        raise rec
    return rec


def _to_micros(unix_s: float) -> float:
    """``unix_s`` to the microsecond, within 0.63 µs (the product's rounding error
    aside, the nearest microsecond). ``round(unix_s, 6)``, always the nearest, goes
    through a decimal string and cost 6 % of a new record's rendering."""
    return math.floor(unix_s * 1e6 + 0.5) / 1e6


def _entry_bytes(key: bytes, part: BodyPart) -> int:
    """About what a memo entry holds: its key's text, its JSON, and per hash a Python
    int and its list slot (~40 bytes)."""
    return len(key) + len(part.json_tail) + 40 * len(part.fields["hashes"])


def _pseudonym(session_id: str) -> str:
    """A stable stand-in for a session id: groups a session's requests without
    writing the id itself (it may be a user name or an e-mail address)."""
    return hashlib.blake2b(session_id.encode(), digest_size=8).hexdigest()
