"""Prompt token ids of request bodies, cheaply: what capture and cache-aware routing
both need, on every request.

Three memos, from coarse to fine, each exact:

1. Chat bodies whose template is message-local are rendered message by message
   (:mod:`kvroute.gateway.prompts.chat_pieces`): a conversation's earlier turns, a system
   prompt or a tool list cost a dictionary lookup, not a template render (given the
   session, not even that: its last prompt's pieces are reused).
2. Rendered text is split at the tokenizer's added tokens (``<|im_start|>``,
   ``<|im_end|>``, ...). The tokenizer splits there first as well (added tokens are
   matched before the pre-tokenizer runs), so encoding the pieces one by one gives
   exactly the ids of encoding the whole text. Each piece's ids are memoised (LRU,
   by text). A message piece begins with an added token (``<|im_start|>``), so its
   ids also follow the previous message's ids unchanged.
3. A new piece of plain ASCII text is split into words by
   :class:`~kvroute.trace.pretokenize.AsciiWordEncoder` (the tokenizer's own split,
   in Python's ``re``) and each word's BPE ids are memoised; other text goes to the
   tokenizer.

Ids are kept packed (``bytes`` of native uint32), so a prompt's ids are one
``bytes.join`` of its pieces' rather than a numpy concatenation of many small arrays.

Not thread-safe: give each thread its own instance.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from kvroute.errors import KvrouteError
from kvroute.gateway.prompts.chat_pieces import ChatPieces, Piece
from kvroute.trace.tokenizer import ChatTokenizer
from kvroute.types import TokenIds

_UINT32 = np.dtype(np.uint32)
_SHORT_PIECE_CHARS = 16
"""Text between added tokens this short is memoised even inside a message's piece."""


class PromptTokens:
    """Body → prompt token ids, with a memo of ``max_pieces`` encoded pieces."""

    def __init__(
        self, tokenizer: ChatTokenizer, *, max_pieces: int = 50_000, check_every: int = 256
    ) -> None:
        self.tokenizer = tokenizer
        self.max_pieces = max_pieces
        added = tokenizer.backend.get_added_tokens_decoder()
        self._special_ids = {t.content: i for i, t in added.items()}
        self._special_starts = sorted({c[0] for c in self._special_ids if c})
        """The first characters of the added tokens: text without any holds none."""
        self._special_packed = {
            content: np.array([i], dtype=np.uint32).tobytes()
            for content, i in self._special_ids.items()
        }
        self._prefix_packed = tokenizer.prefix_ids.astype(np.uint32).tobytes()
        self._suffix_packed = tokenizer.suffix_ids.astype(np.uint32).tobytes()
        # Exact splitting needs added tokens that do not eat neighbouring spaces.
        exact = all(not (t.lstrip or t.rstrip) for t in added.values())
        contents = sorted(self._special_ids, key=len, reverse=True)
        self._split = (
            re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")
            if contents and exact
            else None
        )
        words = tokenizer.ascii_word_encoder()
        self._encode_words = words.packed_encoder() if words is not None else None
        """The ASCII word encoder's packed ids (None: text it refuses), as one callable."""
        self._pieces: OrderedDict[str, bytes] = OrderedDict()
        """Text between added tokens -> its ids, packed as native uint32."""
        self._affixes: dict[tuple[str, str], _AffixIds | None] = {}
        self.chat = ChatPieces(
            tokenizer,
            self._piece,
            max_pieces=max_pieces,
            check_every=check_every,
            make_spliced=self._spliced,
        )
        self._num_text_hits = 0
        self._num_text_misses = 0

    @property
    def num_piece_hits(self) -> int:
        """Pieces (messages, or text between added tokens) found in a memo."""
        return self.chat.num_hits + self._num_text_hits

    @property
    def num_piece_misses(self) -> int:
        """Pieces rendered or encoded anew."""
        return self.chat.num_misses + self._num_text_misses

    def text(self, body: Mapping[str, Any]) -> str | None:
        """The rendered prompt text of a chat or text-completion body; None for a
        token-id prompt. Raises :class:`KvrouteError` when the template fails."""
        messages = body.get("messages")
        if isinstance(messages, list):
            tools = _tools(body)
            pieces = self.chat.pieces(messages, tools)
            if pieces is not None:
                return "".join(p.text for p in pieces)
            return self.tokenizer.render_chat(messages, tools)
        return _completion_prompt(body)

    def token_ids(self, body: Mapping[str, Any], session_key: str | None = None) -> TokenIds | None:
        """The prompt's token ids as the engine prefills them; None when the body
        cannot be tokenized (odd content, a template failure, a batch). ``session_key``:
        the conversation the body belongs to, when known (its earlier messages are then
        found without a memo lookup)."""
        if not isinstance(body, dict):
            body = dict(body)
        found = self._dict_ids(body, session_key, False)
        assert not isinstance(found, bytes)  # packed only when asked
        return found

    def packed_ids(self, body: Mapping[str, Any], session_key: str | None = None) -> bytes | None:
        """:meth:`token_ids` packed as native uint32 ``bytes`` (what capture hashes:
        a chat prompt's pieces joined, with no array made)."""
        if not isinstance(body, dict):
            body = dict(body)
        found = self._dict_ids(body, session_key, True)
        if found is None or isinstance(found, bytes):
            return found
        return found.astype(np.uint32, copy=False).tobytes()

    def _dict_ids(
        self, body: dict[str, Any], session_key: str | None, packed: bool
    ) -> TokenIds | bytes | None:
        """The ids; a chat prompt's pieces joined as ``bytes`` when ``packed``, as a
        (writable) array otherwise."""
        # A dict, so that compiled its lookups are the dict's own (not a method call each).
        messages = body.get("messages")
        if isinstance(messages, list):
            tools = body.get("tools")
            pieces = self.chat.pieces(
                messages, tools if isinstance(tools, list) else None, session_key
            )
            if pieces is not None:
                parts = self._packed_parts(pieces)
                if parts is None:  # a piece does not begin at an added token
                    return self.encode("".join([p.text for p in pieces]))
                if packed:
                    return b"".join(parts)
                # A bytearray, so that the array is writable (callers may change theirs);
                # the dtype by position (by keyword: +0.25 µs).
                return np.frombuffer(bytearray().join(parts), _UINT32)
            try:
                return self.encode(self.tokenizer.render_chat(messages, tools))
            except KvrouteError:
                return None
        text = _completion_prompt(body)
        if text is None:
            prompt = body.get("prompt")
            return np.asarray(prompt, dtype=np.uint32) if _is_ids(prompt) else None
        return self.encode(text)

    def encode(self, text: str) -> TokenIds:
        """``tokenizer.encode(text)``, piece by piece through the memo."""
        tok = self.tokenizer
        if self._split is None:
            return tok.encode(text)
        return np.concatenate((tok.prefix_ids, self._bare_ids(text), tok.suffix_ids))

    def _packed_parts(self, pieces: Sequence[Piece]) -> list[bytes] | None:
        """The packed ids of the pieces' text, to be joined, from the pieces' own ids;
        None unless every boundary is an added token (the caller then encodes the
        joined text). One bytes join of these is several times cheaper than
        np.concatenate over a conversation's pieces."""
        packed = [self._prefix_packed]
        for i, piece in enumerate(pieces):
            if i and not piece.starts_at_added_token:
                return None
            packed.append(piece.packed_ids)
        packed.append(self._suffix_packed)
        return packed

    def _piece(self, text: str) -> Piece:
        if self._split is None:
            return Piece(text, self.tokenizer.encode(text).astype(np.uint32).tobytes(), False)
        starts = self._split.match(text) is not None
        # The message memo keeps these ids: the text memo need not hold them twice.
        return Piece(text, self._bare_packed(text, remember=False), starts)

    def _spliced(self, before: str, content: str, after: str) -> Piece:
        """``_piece(before + content + after)`` for a message the template writes
        verbatim between fixed texts: only the text between the added tokens around
        ``content`` is encoded, the rest of the affixes' ids are kept (see
        :class:`_AffixIds` for why that is exact)."""
        text = before + content + after
        split = self._split
        if split is None:
            return self._piece(text)
        key = (before, after)
        if key in self._affixes:
            affix = self._affixes[key]
        else:
            affix = self._affixes[key] = self._affix_ids(before, after)
        if affix is None or (self._may_hold_added(content) and split.search(content) is not None):
            return self._piece(text)
        segment = affix.open_text + content + affix.close_text
        if segment:
            mid = self._pieces.get(segment)
            if mid is None:
                mid = self._plain(segment)
            packed = affix.head + mid + affix.tail
        else:
            packed = affix.head + affix.tail
        starts = affix.starts if before else split.match(text) is not None
        return Piece(text, packed, starts)

    def _may_hold_added(self, text: str) -> bool:
        """Whether ``text`` holds the first character of an added token (a substring
        scan per character, cheaper than the added-token regex on text without any)."""
        return any(start in text for start in self._special_starts)

    def _affix_ids(self, before: str, after: str) -> _AffixIds | None:
        """How ``before`` and ``after`` split around any content holding no added
        token; None when an added token could straddle a boundary."""
        split = self._split
        assert split is not None
        for token in self._special_ids:
            for k in range(1, len(token)):
                if before.endswith(token[:k]) or after.startswith(token[k:]):
                    return None
        ends = [m.end() for m in split.finditer(before)]
        head_len = ends[-1] if ends else 0
        first = split.search(after)
        tail_at = first.start() if first is not None else len(after)
        return _AffixIds(
            self._bare_packed(before[:head_len], remember=False),
            before[head_len:],
            after[:tail_at],
            self._bare_packed(after[tail_at:], remember=False),
            split.match(before) is not None,
        )

    def _bare_ids(self, text: str) -> TokenIds:
        """Ids of ``text`` without BOS/EOS (``self._split`` is set)."""
        return np.frombuffer(self._bare_packed(text), dtype=np.uint32)

    def _bare_packed(self, text: str, *, remember: bool = True) -> bytes:
        """:meth:`_bare_ids`, packed as native uint32; ``remember``: put new pieces in
        the text memo and count hits and misses (off for the pieces of a message,
        which the message memo keeps and counts)."""
        assert self._split is not None
        parts: list[bytes] = []
        specials, pieces = self._special_packed, self._pieces
        for piece in self._split.split(text):
            if not piece:
                continue
            found = specials.get(piece)
            if found is None:
                found = pieces.get(piece)
                if found is None:
                    found = self._plain(piece, remember=remember)
                    if remember:
                        self._num_text_misses += 1
                elif remember:
                    self._num_text_hits += 1
                    pieces.move_to_end(piece)
            parts.append(found)
        return b"".join(parts)

    def _plain(self, piece: str, *, remember: bool = False) -> bytes:
        """A new piece's packed ids, into the text memo when ``remember`` or short."""
        found = self._encode_plain(piece)
        # Short texts (a message's trailing line end) are kept either way.
        if remember or len(piece) <= _SHORT_PIECE_CHARS:
            pieces = self._pieces
            pieces[piece] = found
            if len(pieces) > self.max_pieces:
                pieces.popitem(last=False)
        return found

    def _encode_plain(self, text: str) -> bytes:
        """Packed ids of text that holds no added token."""
        encode_words = self._encode_words
        if encode_words is not None:
            packed = encode_words(text)
            if packed is not None:
                return packed
        ids = self.tokenizer.backend.encode(text, add_special_tokens=False).ids
        return np.asarray(ids, dtype=np.uint32).tobytes()


class _AffixIds(NamedTuple):
    """A role's fixed text around a message's content, as ids where it can be.

    The tokenizer splits text at added tokens before anything else. When no added
    token can straddle the start or the end of the content (no proper prefix of one
    ends ``before``, no proper suffix of one starts ``after``) and the content holds
    none, the split of ``before + content + after`` is the split of ``before`` up to
    its last added token (``head``), then one segment ``open_text + content +
    close_text``, then the split of ``after`` from its first added token (``tail``):
    only that segment is new text."""

    head: bytes
    open_text: str
    close_text: str
    tail: bytes
    starts: bool
    """``before`` begins with an added token."""


def _completion_prompt(body: Mapping[str, Any]) -> str | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # a batch of one
    return prompt if isinstance(prompt, str) else None


def _tools(body: Mapping[str, Any]) -> Sequence[Any] | None:
    tools = body.get("tools")
    return tools if isinstance(tools, list) else None


def _is_ids(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in value)
    )
