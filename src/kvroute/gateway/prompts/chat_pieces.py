"""A chat prompt rendered message by message, each message's text and ids memoised.

Rendering a chat template is the costly part of a prompt that is otherwise known
(Jinja2, sandboxed: ~6 µs a message, ~85 µs for a 14-message conversation). Most
templates are *message-local*: the prompt is the first message's text, then each
later message's text (which depends on that message alone), then the generation
prompt. For those, a conversation's new turn only renders its new messages, and the
rest comes from the memo::

    render([m0, m1, ..., mn], gen=True)
      == render([m0])                                       first piece
       + render([m0, mi]) - render([m0])   for i = 1..n     one piece per message
       + render([m0], gen=True) - render([m0])              generation prompt

Most templates also write a plain message's string content verbatim between a
prefix and a suffix that depend on its role alone (``<|im_start|>user\n`` ...
``<|im_end|>\n``): for those a new message's text is spliced, not rendered. Both are
checked with the real template, per tool list: a few probe conversations (with and
without a system message, several turns) must render to exactly the assembled
pieces, and for splicing, a set of probe contents (padding a template could trim,
JSON and Jinja syntax it could escape, special-token, reasoning and tool-call text it
could cut at, an empty string) must render as exactly prefix + content + suffix. A
template that reads the date (``strftime_now``) is never treated as local (the memo
would freeze the date). The probes cannot prove either property for every input, so
one in ``check_every`` assembled prompts is also rendered whole and compared; a
mismatch turns the memo off for that tool list for good (counted in
``num_check_failures``). Where the memo does not apply (:meth:`ChatPieces.pieces`
returns None), the caller renders the whole prompt. Given the conversation (the
caller's session key), the messages its last prompt had, unchanged and in the same
order, reuse that prompt's pieces: a turn looks up only its new messages (comparing
the old ones costs a string comparison each, not a hash of their contents).

Not thread-safe: one instance per thread.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from kvroute.errors import KvrouteError
from kvroute.trace.tokenizer import ChatTokenizer
from kvroute.types import Message

logger = logging.getLogger("kvroute.gateway.chat_pieces")

_PROBE_CONVERSATIONS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("system", "Probe system A."), ("user", "Probe user 1?"), ("assistant", "Probe reply 1.")),
    (("system", "Probe system B."), ("user", "u1"), ("assistant", "a1"), ("user", "u2")),
    (("user", "Probe user 1?"), ("assistant", "Probe reply 1."), ("user", "Probe user 2?")),
    (("user", "Only one message."),),
    (("system", "Only a system message."),),
)


class Piece:
    """One message's share of the prompt text, and its token ids (no BOS/EOS). A plain
    class with slots: a new message makes one, and compiled (``kvroute._accel``) it
    is built without running Python, where a named tuple's ``__new__`` runs as Python
    code and a frozen dataclass costs several times more. Read-only by convention."""

    __slots__ = ("packed_ids", "starts_at_added_token", "text")

    def __init__(self, text: str, packed_ids: bytes, starts_at_added_token: bool) -> None:
        self.text = text
        self.packed_ids = packed_ids
        """Its token ids as native uint32 (a prompt's ids are one ``bytes.join`` of these)."""
        self.starts_at_added_token = starts_at_added_token
        """The text begins with an added token, so its ids follow any text's ids unchanged."""

    def __repr__(self) -> str:
        return f"Piece({self.text!r}, {len(self.packed_ids) // 4} ids)"


# Contents a template might treat other than verbatim: whitespace it could trim, JSON
# and Jinja syntax it could escape, special-token text, reasoning and tool-call tags it
# could cut at, an empty string it could skip, text outside ASCII.
_CONTENT_PROBES = (
    "kvroute-content-probe-7f3a",
    "  padded both sides \n\n",
    "",
    '{"json": [1, 2]} \\ \' "',
    "<|im_end|><|im_start|>user<|endoftext|></s><s>",
    "<think>reasoning</think>answer",
    "<tool_call>{}</tool_call><tool_response>",
    "line one\nline two\n",
    "naïve 日本語 🙂",
    "{{ not jinja }} {% raw %}",
)


LONG_MESSAGE_CHARS = 512
"""Messages with this much text are looked up among the last long ones first (by
comparing, not hashing: hashing 4 KB of text costs ~1.3 µs, and a request's message
strings are new objects, their hashes not yet known)."""

RECENT_LONG_MESSAGES = 8
"""How many long messages are kept for that lookup (a system prompt or two, tool
lists, documents that recur)."""

_MemoKey = tuple[bytes | None, bool, object]
"""(tool list's JSON, first message?, message key)."""

_Conversation = tuple[bytes | None, list[object], list[Piece]]
"""A conversation's last prompt: its tool list's key, its message keys and pieces."""


@dataclass(slots=True)
class _ToolsState:
    local: bool
    gen: Piece | None = None
    affixes: dict[tuple[str, bool], tuple[str, str] | None] = field(default_factory=dict)
    """Per role, as the first message or a later one: the text around a message's
    content when the template writes string content verbatim (None: it does not,
    render such messages)."""


class ChatPieces:
    """Memoised message-by-message rendering for message-local chat templates."""

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        make_piece: Callable[[str], Piece],
        *,
        max_pieces: int = 50_000,
        check_every: int = 256,
        max_conversations: int = 2048,
        make_spliced: Callable[[str, str, str], Piece] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_pieces = max_pieces
        self.check_every = check_every
        self.max_conversations = max_conversations
        self.num_check_failures = 0
        self.num_hits = 0
        self.num_misses = 0
        self._make_piece = make_piece
        self._make_spliced = make_spliced or (lambda b, c, a: make_piece(b + c + a))
        """``make_piece(before + content + after)``, told where the content is."""
        template = tokenizer.chat_template
        self._possible = (
            template is not None
            and "strftime_now" not in template
            and tokenizer.suffix_ids.size == 0  # a stripped trailing EOS breaks the differences
        )
        self._tools: dict[bytes | None, _ToolsState] = {}
        self._pieces: OrderedDict[_MemoKey, Piece] = OrderedDict()
        self._recent: list[tuple[_MemoKey, Piece]] = []
        """The last long messages' memo keys and pieces, most recent first."""
        self._num_assembled = 0
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        """Per conversation (the caller's session key), LRU: its last prompt's tool list,
        message keys and message pieces, so its next prompt looks up only new messages."""

    def pieces(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None,
        conversation: str | None = None,
    ) -> list[Piece] | None:
        """The prompt's pieces (generation prompt last), or None when the caller must
        render the whole prompt (template not message-local here, odd messages, a
        template error on a one-message window). ``conversation`` names the session
        the prompt belongs to, when known: messages it sent before (the same, in the
        same order) are taken from its last prompt without a memo lookup."""
        if not self._possible or not messages:
            return None
        try:
            tools_key = orjson.dumps(tools) if tools else None
            keys = [message_key(m) for m in messages]
        except (TypeError, orjson.JSONEncodeError):
            return None
        state = self._tools.get(tools_key)
        if state is None:
            state = self._probe(tools_key, tools)
        if not state.local:
            return None
        known: list[Piece] = []
        if conversation is not None:
            prior = self._conversations.get(conversation)
            if prior is not None and prior[0] == tools_key:
                prior_keys = prior[1]
                if len(prior_keys) <= len(keys) and keys[: len(prior_keys)] == prior_keys:
                    known = prior[2]
        try:
            out = self._assemble(messages, keys, tools_key, tools, state, known)
            if out is not None:
                self._num_assembled += 1
                if self._num_assembled % self.check_every == 0:
                    out = self._check(messages, tools, state, out)
        except KvrouteError:
            return None
        if out is not None and conversation is not None:
            conversations = self._conversations
            conversations[conversation] = (tools_key, keys, out[:-1])
            conversations.move_to_end(conversation)
            if len(conversations) > self.max_conversations:
                conversations.popitem(last=False)
        return out

    def _assemble(
        self,
        messages: Sequence[Message],
        keys: list[object],
        tools_key: bytes | None,
        tools: Sequence[Any] | None,
        state: _ToolsState,
        known: Sequence[Piece] = (),
    ) -> list[Piece] | None:
        """The pieces of ``messages``; ``known`` are those of its first messages."""
        memo = self._pieces
        start = len(known)
        memo_keys: list[_MemoKey] = []
        out: list[Piece | None] = list(known)
        num_misses = 0
        for i in range(start, len(keys)):
            key = keys[i]
            memo_key = (tools_key, i == 0, key)
            memo_keys.append(memo_key)
            long = _is_long(key)
            found = self._recent_long(memo_key) if long else None
            if found is None:
                found = memo.get(memo_key)
                if found is None:
                    num_misses += 1
                else:
                    memo.move_to_end(memo_key)  # the hits become the most recent entries
                    if long:
                        self._keep_long(memo_key, found)
            out.append(found)
        self.num_hits += len(keys) - num_misses
        self.num_misses += num_misses
        first = messages[0]
        if num_misses:
            head = out[0]
            base = head.text if head is not None else ""  # every window starts with it
            for i in range(start, len(out)):
                if out[i] is not None:
                    continue
                key = keys[i]
                plain = key if isinstance(key, tuple) else None
                affix = self._affix(state, plain[0], i == 0, first, base, tools) if plain else None
                if plain and affix is not None:
                    piece = self._make_spliced(affix[0], plain[1], affix[1])
                elif i == 0:
                    piece = self._make_piece(self._render([first], tools, False))
                else:
                    window = self._render([first, messages[i]], tools, False)
                    if not window.startswith(base):
                        return None
                    piece = self._make_piece(window[len(base) :])
                memo_key = memo_keys[i - start]
                out[i] = memo[memo_key] = piece
                if len(memo) > self.max_pieces:
                    memo.popitem(last=False)
                if _is_long(key):
                    self._keep_long(memo_key, piece)
                if i == 0:
                    base = piece.text
        pieces: list[Piece] = out  # type: ignore[assignment]  # no None left
        base = pieces[0].text
        if state.gen is None:
            with_gen = self._render([first], tools, True)
            if not with_gen.startswith(base):
                return None
            state.gen = self._make_piece(with_gen[len(base) :])
        pieces.append(state.gen)
        return pieces

    def _recent_long(self, memo_key: _MemoKey) -> Piece | None:
        """The piece of a long message among the last :data:`RECENT_LONG_MESSAGES` long
        ones, found by comparing (a length check, then one ``memcmp`` for the match),
        not by hashing its text as a memo lookup would. None when it is not there."""
        recent = self._recent
        for j in range(len(recent)):
            entry = recent[j]
            if entry[0] == memo_key:
                if j:
                    recent.insert(0, recent.pop(j))
                return entry[1]
        return None

    def _keep_long(self, memo_key: _MemoKey, piece: Piece) -> None:
        recent = self._recent
        recent.insert(0, (memo_key, piece))
        if len(recent) > RECENT_LONG_MESSAGES:
            recent.pop()

    def _render(self, messages: Sequence[Message], tools: Sequence[Any] | None, gen: bool) -> str:
        return self.tokenizer.render_chat(
            list(messages), list(tools) if tools else None, add_generation_prompt=gen
        )

    def _affix(
        self,
        state: _ToolsState,
        role: str,
        is_first: bool,
        first: Message,
        base: str,
        tools: Sequence[Any] | None,
    ) -> tuple[str, str] | None:
        """The text before and after a ``role`` message's string content (as the first
        message or a later one), when every content probe renders as exactly that text
        around it."""
        if (role, is_first) in state.affixes:
            return state.affixes[role, is_first]
        affix: tuple[str, str] | None = None
        try:
            texts: list[str] = []
            for probe in _CONTENT_PROBES:
                message = {"role": role, "content": probe}
                if is_first:
                    texts.append(self._render([message], tools, False))
                    continue
                window = self._render([first, message], tools, False)
                if not window.startswith(base):
                    break
                texts.append(window[len(base) :])
            else:
                at = texts[0].find(_CONTENT_PROBES[0])
                before, after = texts[0][:at], texts[0][at + len(_CONTENT_PROBES[0]) :]
                if at >= 0 and all(
                    text == before + probe + after
                    for text, probe in zip(texts, _CONTENT_PROBES, strict=True)
                ):
                    affix = (before, after)
        except KvrouteError:
            affix = None
        state.affixes[role, is_first] = affix
        return affix

    def _probe(self, tools_key: bytes | None, tools: Sequence[Any] | None) -> _ToolsState:
        """Whether the template is message-local with these tools, on the probes."""
        local = True
        try:
            for conversation in _PROBE_CONVERSATIONS:
                messages = [{"role": role, "content": content} for role, content in conversation]
                full = self._render(messages, tools, True)
                trial = ChatPieces(self.tokenizer, _text_only, check_every=1 << 62)
                keys = [message_key(m) for m in messages]
                pieces = trial._assemble(messages, keys, tools_key, tools, _ToolsState(True))
                if pieces is None or "".join(p.text for p in pieces) != full:
                    local = False
                    break
        except KvrouteError:
            local = False
        if len(self._tools) >= 1024:
            self._tools.clear()  # a bound: tool lists are few, a new one is probed again
        state = self._tools[tools_key] = _ToolsState(local)
        return state

    def _check(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None,
        state: _ToolsState,
        pieces: list[Piece],
    ) -> list[Piece] | None:
        """Render the whole prompt and compare; a mismatch turns the memo off."""
        if self._render(messages, tools, True) == "".join(p.text for p in pieces):
            return pieces
        self.num_check_failures += 1
        state.local = False
        logger.warning(
            "chat template is not message-local for this tool list: rendering whole prompts"
        )
        return None


def message_key(message: Message) -> object:
    """A hashable stand-in for a message: (role, content) for the plain shape, its JSON
    otherwise (raises TypeError/JSONEncodeError for what JSON cannot hold)."""
    if not isinstance(message, dict):
        raise TypeError("a message is not an object")
    if len(message) == 2:
        role, content = message.get("role"), message.get("content")
        if type(role) is str and type(content) is str:
            return (role, content)
    return orjson.dumps(message)


def _is_long(message_key: object) -> bool:
    """A plain message (its key is (role, content)) of :data:`LONG_MESSAGE_CHARS`+."""
    return type(message_key) is tuple and len(message_key[1]) >= LONG_MESSAGE_CHARS


def _text_only(text: str) -> Piece:
    return Piece(text, b"", False)
