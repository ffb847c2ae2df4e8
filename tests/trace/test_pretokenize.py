"""The ASCII word encoder gives exactly the tokenizer's ids, for every GGUF split family,
with its chunk memo in Python and in C (``asciiwords.c``, when built)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from kvroute import _accel
from kvroute.trace.gguf import read_gguf_metadata
from kvroute.trace.gguf_bpe import PRE_FAMILIES, bpe_from_gguf
from kvroute.trace.pretokenize import AsciiWordEncoder, WordSplit, _space_by_space, ascii_regex
from kvroute.trace.tokenizer import default_model_path
from kvroute.types import TokenIds

# Pieces that exercise the split rules: contractions, digit runs, runs of spaces
# before words, digits and line ends, punctuation runs, tabs and carriage returns.
PIECES = [*"aZq09.,!?-_()'\n\t\r", "don't", "we'LL", "x's", " ", " ", "  ", "   ", "123", "4567"]
ascii_texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


C_BUILT = _accel.optional("kvroute.trace.asciiwords") is not None
needs_c = pytest.mark.skipif(not C_BUILT, reason=f"asciiwords.c: {_accel.status('trace')[1]}")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param((pre, use_c), marks=[needs_c] if use_c else [])
        for pre, _ in PRE_FAMILIES
        for use_c in (False, True)
    ],
    ids=[f"{names.split()[0]}-{how}" for _, names in PRE_FAMILIES for how in ("py", "c")],
)
def family(request: pytest.FixtureRequest) -> tuple[Tokenizer, AsciiWordEncoder]:
    """The default model's vocabulary and merges under each family's split; the chunk
    memo in Python, then in C."""
    meta = read_gguf_metadata(default_model_path())
    pre, use_c = request.param
    tokenizer = bpe_from_gguf(meta, pre)
    split = WordSplit(pre.regex, pre.split_digits)
    return tokenizer, AsciiWordEncoder(tokenizer, split, use_c=use_c)


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


@needs_c
def test_c_chunk_memo_fills_and_bounds_as_python_does() -> None:
    """Both memos hold the same chunks after the same texts, and a tiny bound (cleared
    over and over) changes no ids."""
    meta = read_gguf_metadata(default_model_path())
    pre = PRE_FAMILIES[1][0]
    tokenizer = bpe_from_gguf(meta, pre)
    split = WordSplit(pre.regex, pre.split_digits)
    py, c = (AsciiWordEncoder(tokenizer, split, use_c=use_c) for use_c in (False, True))
    texts = [f"Say hello in a few words. Request {i}.{i * 7}." for i in range(50)]
    texts += ["one two", " lead space x", "trail space x ", "two  spaces here", "tab\t here x"]
    for text in texts:
        assert _ids(c.encode(text)) == _ids(py.encode(text))
    assert c._chunks == py._chunks and c._heads == py._heads and c._memo == py._memo
    small = AsciiWordEncoder(tokenizer, split, max_words=6, use_c=True)
    for text in texts:
        assert _ids(small.encode(text)) == tokenizer.encode(text, add_special_tokens=False).ids
        assert len(small._chunks) <= 6 + 8
    assert c.encode("caf\u00e9 au lait") is None and c.encode("bell\x07 x y") is None


@needs_c
def test_c_chunk_memo_refuses_a_wrong_callback_result() -> None:
    from kvroute.trace.pretokenize import _C

    assert _C is not None
    with pytest.raises(TypeError, match="must return bytes"):
        _C.encode_chunks({}, {}, lambda text: [1, 2], 100, "a b c")
    with pytest.raises(ZeroDivisionError):
        _C.encode_chunks({}, {}, lambda text: 1 / 0, 100, "a b c")


@needs_c
@settings(max_examples=2000, deadline=None)
@given(
    text=st.text(alphabet="aZsStrevmld09'' \t\n\r.!-", max_size=24),
    isolated_digits=st.booleans(),
)
def test_c_word_split_equals_the_ascii_regexes(text: str, isolated_digits: bool) -> None:
    """The C scanner cuts words exactly where the ASCII regexes of GPT-2's two splits
    do: contractions, optional leading spaces, digit runs or single digits, punctuation
    runs, and whitespace runs before words, digits and the end."""
    from kvroute.trace.pretokenize import _C, _GPT2_ISOLATED_DIGITS, GPT2_REGEX

    assert _C is not None
    regex = _GPT2_ISOLATED_DIGITS if isolated_digits else ascii_regex(GPT2_REGEX)
    assert _C.split_words(text, isolated_digits) == re.findall(regex, text)
