"""kvroute's own trace JSONL: what the gateway captures, hash-only by default.

The first line is a header, every other line one request::

    {"kvroute_trace": 1, "block_size": 16, "hash_scheme": "kvroute-chain-v1", "seed": 7743...}

(``kvroute export`` writes ``"hash_scheme": "kvroute-keyed-v1", "key_id": "..."``: the
same chain passed through a keyed function, see :func:`kvroute.trace.hashing.keyed_hashes`.)
    {"t": 1764504000.125, "end_t": 1764504001.5, "session": "s1", "model": "smollm2",
     "input_len": 1234, "output_len": 56, "hashes": [1311..., 9042...],
     "class": "agent", "tools": true, "structured": "none", "turn": 3, "messages": 7,
     "cached": 1200, "backend": "llama-1"}

``hashes`` are the chained hashes (:mod:`kvroute.trace.hashing`) of the prompt's
full blocks plus, when the prompt does not end on a block boundary, one more entry
for the partial last block, so ``len(hashes) == ceil(input_len / block_size)``. Only
``input_len`` and ``hashes`` are required; the README documents every field.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvroute.trace.formats.base import (
    Container,
    ReadOptions,
    RecordError,
    opt_int,
    opt_str,
    opt_time_s,
    require_dict,
)
from kvroute.trace.hashing import HASH_SCHEME, KEYED_HASH_SCHEME
from kvroute.trace.records import BlockPrompt, Request, RequestAttrs, StructuredOutput

SCHEMA_VERSION = 1
HEADER_KEY = "kvroute_trace"


class HeaderError(RecordError):
    """The header line cannot be used. Every record after it is read with the header's
    settings (block size, layout version), so a reader must stop here whatever its
    skip policy: skipping it would read the records with the wrong settings."""

    def __init__(self, message: str, field: str | None, hint: str) -> None:
        super().__init__(message, field)
        self.hint = hint


class KvrouteFormat:
    name = "kvroute"
    description = (
        "kvroute trace JSONL (gateway capture): header line, then chained block hashes per request"
    )
    container = Container.JSONL

    def __init__(self) -> None:
        self._block_size = 16

    def sniff(self, first: Any) -> bool:
        return isinstance(first, dict) and HEADER_KEY in first

    def parse(self, record: Any, index: int, line: int, options: ReadOptions) -> list[Request]:
        obj = require_dict(record)
        if HEADER_KEY in obj:
            self._block_size = _header_block_size(obj)
            return []
        block_size = options.block_size_tokens or self._block_size
        raw = obj.get("hashes")
        if not isinstance(raw, list):
            raise RecordError("expected a list of unsigned 64-bit integers", "hashes")
        try:
            hashes = np.array(raw, dtype=np.uint64)
        except (TypeError, ValueError, OverflowError):
            raise RecordError("expected a list of unsigned 64-bit integers", "hashes") from None
        input_len = opt_int(obj, "input_len")
        if input_len is None:
            raise RecordError("missing", "input_len")
        if len(raw) != -(-input_len // block_size):
            raise RecordError(
                f"{len(raw)} hashes do not cover {input_len} tokens in blocks of {block_size}",
                "hashes",
            )
        structured = obj.get("structured", "none")
        try:
            kind = StructuredOutput(structured)
        except ValueError:
            valid = ", ".join(k.value for k in StructuredOutput)
            raise RecordError(
                f"unknown kind {structured!r} (valid: {valid})", "structured"
            ) from None
        return [
            Request(
                prompt=BlockPrompt(hashes, block_size, input_len),
                arrival_s=opt_time_s(obj, "t"),
                end_s=opt_time_s(obj, "end_t"),
                session_id=opt_str(obj, "session"),
                user_id=opt_str(obj, "user"),
                model=opt_str(obj, "model"),
                output_len=opt_int(obj, "output_len"),
                attrs=RequestAttrs(
                    has_tools=bool(obj.get("tools", False)),
                    structured_output=kind,
                    turn_index=opt_int(obj, "turn"),
                    num_messages=opt_int(obj, "messages"),
                ),
                reported_cached_tokens=opt_int(obj, "cached"),
                source_line=line,
            )
        ]


def _header_block_size(header: dict[str, Any]) -> int:
    """The header's block size, after checking its version; raises :class:`HeaderError`."""
    version = header[HEADER_KEY]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise HeaderError(
            f"unsupported trace version {version!r} (this kvroute reads version {SCHEMA_VERSION})",
            HEADER_KEY,
            hint="it was written by another kvroute release: read it with that release or a newer one",
        )
    _check_hash_scheme(header)
    try:
        return opt_int(header, "block_size", minimum=1) or 16
    except RecordError as exc:
        raise HeaderError(
            f"header: {exc.message}",
            exc.field,
            hint='fix the header line, e.g. {"kvroute_trace": 1, "block_size": 16}',
        ) from None


def _check_hash_scheme(header: dict[str, Any]) -> None:
    """A keyed export must name its key; an unknown scheme is refused: its hashes would
    compare with nothing this release computes."""
    scheme = header.get("hash_scheme", HASH_SCHEME)
    if scheme == HASH_SCHEME:
        return
    if scheme != KEYED_HASH_SCHEME:
        raise HeaderError(
            f"unknown hash scheme {scheme!r} (this kvroute reads {HASH_SCHEME} and {KEYED_HASH_SCHEME})",
            "hash_scheme",
            hint="it was written by another tool or release",
        )
    kid = header.get("key_id")
    if not isinstance(kid, str) or len(kid) != 16 or any(c not in "0123456789abcdef" for c in kid):
        raise HeaderError(
            "a keyed trace's header needs its key_id (16 hex digits)",
            "key_id",
            hint="write keyed traces with `kvroute export`, which adds it",
        )
