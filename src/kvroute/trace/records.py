"""The trace model: one :class:`Request` per request an engine would have seen.

A prompt arrives in one of four forms. Readers produce whichever their format carries;
:func:`kvroute.trace.tokenize.tokenize_requests` turns chat and text prompts into
token ids with the model's chat template and tokenizer. Analysis then works on token ids
or on chained block hashes through the same code path.

=================  ==========================================  ====================
form               carries                                     produced by
=================  ==========================================  ====================
ChatPrompt         messages + tools, before the chat template  OpenAI chat, ShareGPT
TextPrompt         raw completion text                         OpenAI completions
TokenPrompt        token ids as the engine sees them           tokenizer, kvroute
BlockPrompt        chained block hashes + block size + length  Mooncake, kvroute
=================  ==========================================  ====================
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvroute.errors import InputError
from kvroute.types import BlockHashes, Message, TokenIds


class StructuredOutput(enum.Enum):
    """What kind of constrained output a request asked for."""

    NONE = "none"
    JSON_OBJECT = "json_object"
    JSON_SCHEMA = "json_schema"
    REGEX = "regex"
    GRAMMAR = "grammar"
    CHOICE = "choice"


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class TextPrompt:
    text: str


@dataclass(frozen=True, slots=True)
class TokenPrompt:
    token_ids: TokenIds

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass(frozen=True, slots=True)
class BlockPrompt:
    """A prompt known only by its chained block hashes (Mooncake, kvroute capture).

    ``block_hashes[i]`` covers tokens ``[0, (i + 1) * block_size_tokens)``; the last
    block may be partial, so ``num_tokens`` is kept separately and satisfies
    ``(len(block_hashes) - 1) * block_size_tokens < num_tokens <= len(block_hashes) * block_size_tokens``
    whenever there is at least one block.
    """

    block_hashes: BlockHashes
    block_size_tokens: int
    num_tokens: int


Prompt = ChatPrompt | TextPrompt | TokenPrompt | BlockPrompt


@dataclass(frozen=True, slots=True)
class RequestAttrs:
    """What the request is, independent of its prompt form."""

    has_tools: bool = False
    structured_output: StructuredOutput = StructuredOutput.NONE
    turn_index: int | None = None
    num_messages: int | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace.

    ``arrival_s`` and ``end_s`` are seconds on the trace's own clock (epoch or relative),
    ``None`` when the source has no timing. ``output_len`` is in tokens when known;
    ``output_text`` / ``output_token_ids`` carry the answer when the source has it, so
    multi-turn analysis can tell how much of the next turn is this turn's prompt plus
    output. ``reported_cached_tokens`` is what the serving engine said it reused
    (``usage.prompt_tokens_details.cached_tokens``), when logged.
    """

    prompt: Prompt
    arrival_s: float | None = None
    end_s: float | None = None
    session_id: str | None = None
    user_id: str | None = None
    model: str | None = None
    output_len: int | None = None
    output_text: str | None = None
    output_token_ids: TokenIds | None = None
    attrs: RequestAttrs = field(default_factory=RequestAttrs)
    reported_cached_tokens: int | None = None
    source_line: int | None = None


def as_token_ids(values: Any) -> TokenIds:
    """Token ids as the canonical array type (uint32), from any int sequence."""
    return np.asarray(values, dtype=np.uint32)


def block_prompts(requests: Iterable[Request], block_size_tokens: int) -> list[BlockPrompt]:
    """Each request's block-hash prompt. Raises :class:`InputError` (with the request's
    line) at the first prompt of another form or with blocks of another size: a
    hash-only trace cannot be mixed."""
    prompts: list[BlockPrompt] = []
    for req in requests:
        p = req.prompt
        if not isinstance(p, BlockPrompt):
            raise InputError(
                "a hash-only trace cannot mix in token or text prompts", line=req.source_line
            )
        if p.block_size_tokens != block_size_tokens:
            raise InputError(
                f"block size changes within the trace ({p.block_size_tokens} vs "
                f"{block_size_tokens} tokens)",
                line=req.source_line,
            )
        prompts.append(p)
    return prompts
