"""The ASCII word encoder gives exactly the tokenizer's ids, for every GGUF split family."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from kvroute.trace.gguf import read_gguf_metadata
from kvroute.trace.gguf_bpe import PRE_FAMILIES, bpe_from_gguf
from kvroute.trace.pretokenize import AsciiWordEncoder, WordSplit, _space_by_space, ascii_regex
from kvroute.trace.tokenizer import default_model_path
from kvroute.types import TokenIds

# Pieces that exercise the split rules: contractions, digit runs, runs of spaces
# before words, digits and line ends, punctuation runs, tabs and carriage returns.
PIECES = [*"aZq09.,!?-_()'\n\t\r", "don't", "we'LL", "x's", " ", " ", "  ", "   ", "123", "4567"]
ascii_texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


@pytest.fixture(
    scope="module", params=PRE_FAMILIES, ids=[names.split()[0] for _, names in PRE_FAMILIES]
)
def family(request: pytest.FixtureRequest) -> tuple[Tokenizer, AsciiWordEncoder]:
    """The default model's vocabulary and merges under each family's split."""
    meta = read_gguf_metadata(default_model_path())
    pre = request.param[0]
    tokenizer = bpe_from_gguf(meta, pre)
    split = WordSplit(pre.regex, pre.split_digits)
    return tokenizer, AsciiWordEncoder(tokenizer, split)


@settings(max_examples=300, deadline=None)
@given(text=ascii_texts)
def test_encode_equals_the_tokenizer(family: tuple[Tokenizer, AsciiWordEncoder], text: str) -> None:
    tokenizer, encoder = family
    expected = tokenizer.encode(text, add_special_tokens=False).ids
    assert _ids(encoder.encode(text)) == expected
    assert _ids(encoder.encode(text)) == expected  # again, from the memos


def test_long_prose_equals_the_tokenizer(family: tuple[Tokenizer, AsciiWordEncoder]) -> None:
    tokenizer, encoder = family
    text = (
        "The store opens at 9:30am; it's 2024-11-30.\n\nAisle 12 holds 3,000 screws (M4x20)"
        " and   wide  gaps\tand tabs.\r\n  Indented line, 'quoted' words, x=y+1 -> done!  "
    ) * 20
    assert _ids(encoder.encode(text)) == tokenizer.encode(text, add_special_tokens=False).ids


def test_refuses_text_it_cannot_split_exactly(family: tuple[Tokenizer, AsciiWordEncoder]) -> None:
    _, encoder = family
    for text in ("café", "emoji 🙂", "form\x0cfeed", "unit\x1fsep", "nul\x00"):
        assert encoder.encode(text) is None


def _ids(ids: TokenIds | None) -> list[int] | None:
    return None if ids is None else ids.tolist()


def test_ascii_regex_spells_out_classes() -> None:
    assert ascii_regex(r"[^\s\p{L}\p{N}]+|\p{N}{1,3}") == r"[^\t\n\r A-Za-z0-9]+|[0-9]{1,3}"


_UNSAFE_REFERENCE = re.compile(r"[^\t\n\r\x20-\x7e]")
_SPACE_BY_SPACE_REFERENCE = re.compile(r"[\t\n\r ] | [\t\n\r]")


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=" \t\n\r\x0b\x1f\x7fab1é", max_size=12))
def test_fast_checks_equal_their_regexes(text: str) -> None:
    assert AsciiWordEncoder.accepts(text) == (
        text.isascii() and _UNSAFE_REFERENCE.search(text) is None
    )
    assert _space_by_space(text) == (_SPACE_BY_SPACE_REFERENCE.search(text) is not None)


def test_chat_like_text_equals_the_tokenizer(family: tuple[Tokenizer, AsciiWordEncoder]) -> None:
    """Texts cut at single spaces (the memoised chunk path), with line ends inside
    chunks, digits, and a first chunk that recurs later, twice over (from the memos)."""
    tokenizer, encoder = family
    texts = [
        "user\nnail42 screw7 aisle 12,000 x's hinge9",
        "assistant\nscrew7 user\nnail42 don't 3.5kg\nnext line",
        "nail42 nail42 nail42",
    ]
    for text in texts * 2:
        assert _ids(encoder.encode(text)) == tokenizer.encode(text, add_special_tokens=False).ids
