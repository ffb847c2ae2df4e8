"""A fast, exact encoder for plain-ASCII text of a byte-level BPE tokenizer.

``tokenizers`` spends most of an ``encode`` call pre-tokenizing (about 0.6 µs a
character here: 140 µs for a 200-character chat message), and keeps no memo of whole
words across calls. A prompt is mostly words seen before, so :class:`AsciiWordEncoder`
pre-tokenizes with Python's ``re`` (the same split, written for ASCII) and memoises
each word's BPE ids; only unseen words go to the tokenizer's BPE model.

Exactness: the split regexes are the tokenizer's own (:mod:`kvroute.trace.tokenizer`'s
GGUF pre-tokenizer families) with ``\\p{L}``, ``\\p{N}`` and ``\\s`` narrowed to ASCII,
which is the same set on the texts this encoder accepts: ASCII with no control
character other than tab, newline and carriage return (``\\x0b``, ``\\x0c`` and
``\\x1c``-``\\x1f`` are whitespace to some regex engines and not to others, so they
are refused). Other text returns None and the caller uses the tokenizer. Each word is
mapped to its byte-level form and tokenized by the BPE model itself, so merges,
``ignore_merges`` and the vocabulary are the tokenizer's. The text must hold no added
token (the caller splits those out first, as the tokenizer does).

The chunk memo's lookups and join also exist in C (``asciiwords.c``, used when built:
:mod:`kvroute._accel`), and so does the word split for the two GPT-2 splits
(the default model's among them): then Python runs only the BPE of a new word.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from kvroute import _accel
from kvroute.types import TokenIds

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
"""The split ``pre_tokenizers.ByteLevel(use_regex=True)`` applies (GPT-2's)."""

# GPT-2's split after every digit was isolated, as one pass: a digit is a word, no
# word spans one, and a run of spaces before a digit ends as it would at a text's end.
_GPT2_ISOLATED_DIGITS = (
    r"[0-9]|'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[^\t\n\r A-Za-z0-9]+"
    r"|[\t\n\r ]+(?![^\t\n\r 0-9])|[\t\n\r ]+"
)

_C = _accel.optional("kvroute.trace.asciiwords")
_UNSAFE = re.compile(r"[^\t\n\r\x20-\x7e]")
_ASCII_CLASSES = {r"\p{L}": "A-Za-z", r"\p{N}": "0-9", r"\s": r"\t\n\r "}


def ascii_regex(unicode_regex: str) -> str:
    """``unicode_regex`` with ``\\p{L}``, ``\\p{N}`` and ``\\s`` spelled out for ASCII
    text, inside and outside character classes."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(unicode_regex):
        for name, chars in _ASCII_CLASSES.items():
            if unicode_regex.startswith(name, i):
                out.append(chars if in_class else f"[{chars}]")
                i += len(name)
                break
        else:
            ch = unicode_regex[i]
            if ch == "\\":
                out.append(unicode_regex[i : i + 2])
                i += 2
                continue
            if ch == "[" and not in_class:
                in_class = True
            elif ch == "]" and in_class:
                in_class = False
            out.append(ch)
            i += 1
    return "".join(out)


def _byte_level_table() -> dict[int, str]:
    """GPT-2's bytes-to-unicode map, for the ASCII bytes only."""
    printable = (
        set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    )
    table: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable:
            char = chr(byte)
        else:
            char = chr(256 + shifted)
            shifted += 1
        if byte < 128:
            table[byte] = char
    return table


@dataclass(frozen=True, slots=True)
class WordSplit:
    """How a byte-level BPE tokenizer splits text into words before BPE."""

    regex: str | None
    """The split regex; None: GPT-2's, applied by ``ByteLevel(use_regex=True)``."""
    split_digits: bool
    """Every digit isolated first (llama.cpp's smollm and starcoder types)."""


class AsciiWordEncoder:
    """Token ids of plain-ASCII text, word by word through a memo.

    ``split`` must be how ``tokenizer`` pre-tokenizes (no normalizer, then the split,
    then ByteLevel). Not thread-safe (the memo): one instance per thread.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        split: WordSplit,
        *,
        max_words: int = 200_000,
        use_c: bool = True,
    ) -> None:
        self._model = tokenizer.model
        self._c_chunks = _C.encode_chunks if use_c and _C is not None else None
        """``asciiwords.encode_chunks``: :meth:`encode_packed` in C (when built)."""
        self._digits: Callable[[str], list[str]] | None = None
        if split.split_digits and split.regex is None:
            self._words = re.compile(_GPT2_ISOLATED_DIGITS).findall
        else:
            self._words = re.compile(ascii_regex(split.regex or GPT2_REGEX)).findall
            if split.split_digits:  # digits isolated first, then the split per segment
                self._digits = re.compile(r"([0-9])").split
        self._byte_level = str.maketrans(_byte_level_table())
        self._memo: dict[str, bytes] = {}
        """Word -> its ids, packed as uint32."""
        self._chunks: dict[str, bytes] = {}
        """``part`` -> the packed ids of the chunk ``" " + part``."""
        self._heads: dict[str, bytes] = {}
        """A text's first chunk (no space before it) -> its packed ids."""
        self.max_words = max_words
        self._encode_new: Callable[[str], bytes] = self._encode_words
        """A new chunk's ids: :meth:`_encode_words`, or its C twin for GPT-2's splits."""
        if self._c_chunks is not None and _C is not None and split.regex is None:
            self._encode_new = functools.partial(
                _C.encode_words, self._memo, self._bpe, max_words, split.split_digits
            )

    def packed_encoder(self) -> Callable[[str], bytes | None]:
        """:meth:`encode_packed` as one callable: the C function itself with its memos
        bound when built (a caller on every request saves this method's Python frame)."""
        if self._c_chunks is None:
            return self.encode_packed
        return functools.partial(
            self._c_chunks, self._heads, self._chunks, self._encode_new, self.max_words
        )

    @staticmethod
    def accepts(text: str) -> bool:
        """Whether :meth:`encode` can take ``text`` (plain ASCII, see the module doc)."""
        # isprintable() is a C scan that settles most texts (line ends aside: a chat
        # message's text starts with one); the regex only runs on the rest.
        return text.isascii() and (
            text.isprintable()
            or text.replace("\n", " ").isprintable()
            or _UNSAFE.search(text) is None
        )

    def encode(self, text: str) -> TokenIds | None:
        """The ids ``tokenizer.encode(text, add_special_tokens=False)`` gives (a
        read-only array), or None when the text is not plain ASCII."""
        packed = self.encode_packed(text)
        return None if packed is None else np.frombuffer(packed, dtype=np.uint32)

    def encode_packed(self, text: str) -> bytes | None:
        """:meth:`encode`'s ids packed as native uint32, or None.

        A space between two non-space characters always starts a word (no split regex
        here lets a word run across one, nor start at the character after it), so
        when every space is such a space the text is cut at them into chunks whose
        words do not depend on their neighbours, and whole chunks are memoised (as
        packed ids, so that a text's ids are one ``bytes.join``).
        """
        c_chunks = self._c_chunks
        if c_chunks is not None:
            found: bytes | None = c_chunks(
                self._heads, self._chunks, self._encode_new, self.max_words, text
            )
            return found
        if not self.accepts(text):
            return None
        return b"".join(self._chunk_ids(text))

    def _chunk_ids(self, text: str) -> list[bytes]:
        parts = text.split(" ")
        if len(parts) < 3 or not parts[0] or not parts[-1] or _space_by_space(text):
            return [self._encode_words(text)]
        # Chunks after the first are " " + part, memoised by part (no string built).
        memo, heads = self._chunks, self._heads
        found = list(map(memo.get, parts))
        found[0] = heads.get(parts[0])
        if None in found:
            if len(memo) + len(parts) > self.max_words or len(heads) >= self.max_words:
                memo.clear()  # a bound, not an LRU (as for words)
                heads.clear()
            if found[0] is None:
                found[0] = heads[parts[0]] = self._encode_words(parts[0])
            for i, part in enumerate(parts):
                if found[i] is None:
                    found[i] = memo[part] = self._encode_words(" " + part)
        return found  # type: ignore[return-value]

    def _encode_words(self, text: str) -> bytes:
        words: list[str] = []
        if self._digits is None:
            words = self._words(text)
        else:
            for segment in self._digits(text):
                if segment:
                    words.extend(self._words(segment))
        memo = self._memo
        found = list(map(memo.get, words))
        if None in found:
            if len(memo) + len(words) > self.max_words:
                memo.clear()  # a bound, not an LRU: words recur, the memo refills
            for i, word in enumerate(words):
                if found[i] is None:
                    ids = memo.get(word)
                    if ids is None:
                        ids = memo[word] = self._bpe(word)
                    found[i] = ids
        return b"".join(found)  # type: ignore[arg-type]

    def _bpe(self, word: str) -> bytes:
        """A new word's packed ids, from the tokenizer's BPE model."""
        tokens = [t.id for t in self._model.tokenize(word.translate(self._byte_level))]
        return np.array(tokens, dtype=np.uint32).tobytes()


def _space_by_space(text: str) -> bool:
    """Whether a space in ``text`` is next to other whitespace (tab, line end, space):
    substring scans, several times cheaper than a regex."""
    return (
        "  " in text
        or ("\n" in text and ("\n " in text or " \n" in text))
        or ("\t" in text and ("\t " in text or " \t" in text))
        or ("\r" in text and ("\r " in text or " \r" in text))
    )
