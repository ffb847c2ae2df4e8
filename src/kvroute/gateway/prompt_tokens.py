"""Prompt token ids of request bodies, cheaply: what capture and cache-aware routing
both need, on every request.

The prompt is rendered with the model's chat template (what the engine does), then
split at the tokenizer's special tokens (``<|im_start|>``, ``<|im_end|>``, ...). The
tokenizer splits there first as well (added tokens are matched before the BPE
pre-tokenizer runs), so encoding the pieces one by one gives exactly the ids of
encoding the whole text. Each piece's ids are memoised (LRU, by text): a system
prompt, a tool list, or a conversation's earlier turns are encoded once, and a new
turn costs only its new message. The pieces are found with one regex pass.

Not thread-safe: give each thread its own instance.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from kvroute.errors import KvrouteError
from kvroute.trace.tokenizer import ChatTokenizer
from kvroute.types import TokenIds


class PromptTokens:
    """Body → prompt token ids, with a memo of ``max_pieces`` encoded pieces."""

    def __init__(self, tokenizer: ChatTokenizer, *, max_pieces: int = 50_000) -> None:
        self.tokenizer = tokenizer
        self.max_pieces = max_pieces
        added = tokenizer.backend.get_added_tokens_decoder()
        self._special_ids = {t.content: i for i, t in added.items()}
        # Exact splitting needs added tokens that do not eat neighbouring spaces.
        exact = all(not (t.lstrip or t.rstrip) for t in added.values())
        contents = sorted(self._special_ids, key=len, reverse=True)
        self._split = (
            re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")
            if contents and exact
            else None
        )
        self._pieces: OrderedDict[str, TokenIds] = OrderedDict()
        self.num_piece_hits = 0
        self.num_piece_misses = 0

    def text(self, body: Mapping[str, Any]) -> str | None:
        """The rendered prompt text of a chat or text-completion body; None for a
        token-id prompt. Raises :class:`KvrouteError` when the template fails."""
        messages = body.get("messages")
        if isinstance(messages, list):
            tools = body.get("tools")
            return self.tokenizer.render_chat(messages, tools if isinstance(tools, list) else None)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]  # a batch of one
        return prompt if isinstance(prompt, str) else None

    def token_ids(self, body: Mapping[str, Any]) -> TokenIds | None:
        """The prompt's token ids as the engine prefills them; None when the body
        cannot be tokenized (odd content, a template failure, a batch)."""
        try:
            text = self.text(body)
        except KvrouteError:
            return None
        if text is None:
            prompt = body.get("prompt")
            return np.asarray(prompt, dtype=np.uint32) if _is_ids(prompt) else None
        return self.encode(text)

    def encode(self, text: str) -> TokenIds:
        """``tokenizer.encode(text)``, piece by piece through the memo."""
        tok = self.tokenizer
        if self._split is None:
            return tok.encode(text)
        parts: list[TokenIds] = [tok.prefix_ids]
        specials, pieces = self._special_ids, self._pieces
        for piece in self._split.split(text):
            if not piece:
                continue
            found = pieces.get(piece)
            if found is None:
                special = specials.get(piece)
                if special is not None:
                    found = np.array([special], dtype=np.uint32)
                else:
                    self.num_piece_misses += 1
                    ids = tok.backend.encode(piece, add_special_tokens=False).ids
                    found = np.asarray(ids, dtype=np.uint32)
                pieces[piece] = found
                if len(pieces) > self.max_pieces:
                    pieces.popitem(last=False)
            else:
                self.num_piece_hits += 1
                pieces.move_to_end(piece)
            parts.append(found)
        parts.append(tok.suffix_ids)
        return np.concatenate(parts)


def _is_ids(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in value)
    )
