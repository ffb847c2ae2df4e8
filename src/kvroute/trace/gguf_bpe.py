"""A GGUF file's byte-level BPE, rebuilt with the ``tokenizers`` library from the file's
metadata and configured to split text exactly as llama.cpp's
``llama-vocab.cpp`` does for the file's ``tokenizer.ggml.pre`` type:

=================  ===============================================  ==============
pre type family    llama.cpp split                                  merges
=================  ===============================================  ==============
gpt2               GPT-2 regex                                      ranked
smollm/starcoder   each digit alone, then the GPT-2 regex           ranked
llama3             llama3 regex (digits in runs of up to 3)         whole words first
qwen2              llama3 regex with single digits                  ranked
=================  ===============================================  ==============

Control, user-defined and unknown tokens (``tokenizer.ggml.token_type`` 3, 4, 2) are
added tokens, so ``<|im_start|>`` in text is one id, as with llama.cpp's
``parse_special``. (llama.cpp matches special tokens longest first over the whole text,
``tokenizers`` leftmost-longest; the two differ only for overlapping special tokens.)
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from kvroute.errors import TokenizerError
from kvroute.trace.gguf import GGUFMetadata

# llama.cpp's token types (llama.h: enum llama_token_type).
_TOKEN_TYPE_UNKNOWN = 2
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

_LLAMA3_REGEX = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = _LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


@dataclass(frozen=True, slots=True)
class PreType:
    """How llama.cpp pre-tokenizes one family of ``tokenizer.ggml.pre`` values."""

    regex: str | None  # None: the GPT-2 regex built into ByteLevel
    split_digits: bool
    ignore_merges: bool = False
    add_bos_default: bool = False


_GPT2 = PreType(regex=None, split_digits=False)
_SMOLLM = PreType(regex=None, split_digits=True)
_LLAMA3 = PreType(_LLAMA3_REGEX, split_digits=False, ignore_merges=True, add_bos_default=True)
_LLAMA3_RANKED = PreType(regex=_LLAMA3_REGEX, split_digits=False)
_QWEN2 = PreType(regex=_QWEN2_REGEX, split_digits=False)

# tokenizer.ggml.pre values -> llama.cpp's handling (llama-vocab.cpp, llama_vocab::impl::load).
PRE_FAMILIES: tuple[tuple[PreType, str], ...] = (
    (
        _GPT2,
        "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert"
        " mpt olmo jais exaone4",
    ),
    (_SMOLLM, "smollm starcoder refact command-r codeshell exaone minerva-7b"),
    (_LLAMA3, "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano"),
    (_LLAMA3_RANKED, "dbrx smaug-bpe"),
    (_QWEN2, "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez"),
)


def supported_pre_types() -> list[str]:
    """The ``tokenizer.ggml.pre`` values a GGUF tokenizer can be built for."""
    return sorted(name for _, names in PRE_FAMILIES for name in names.split())


def pre_type(name: str) -> PreType | None:
    """How llama.cpp splits text for a ``tokenizer.ggml.pre`` value (``None``: unsupported)."""
    for pre, names in PRE_FAMILIES:
        if name in names.split():
            return pre
    return None


def bpe_from_gguf(meta: GGUFMetadata, pre: PreType) -> Tokenizer:
    """The file's BPE, split as llama.cpp splits for ``pre``. Raises ``TokenizerError``."""
    tokens = meta.get_str_list("tokenizer.ggml.tokens")
    merges = meta.get_str_list("tokenizer.ggml.merges")
    token_types = (
        meta.get_int_list("tokenizer.ggml.token_type")
        if "tokenizer.ggml.token_type" in meta
        else [1] * len(tokens)
    )
    if len(token_types) < len(tokens):
        raise TokenizerError(f"{meta.source}: fewer token types than tokens")
    vocab = {token: token_id for token_id, token in enumerate(tokens)}
    # llama.cpp splits a merge at the first space after the first byte.
    pairs: list[tuple[str, str]] = []
    for merge in merges:
        cut = merge.find(" ", 1)
        if cut < 0:
            raise TokenizerError(f"{meta.source}: malformed merge {merge!r}")
        pairs.append((merge[:cut], merge[cut + 1 :]))
    try:
        tokenizer = Tokenizer(
            models.BPE(vocab=vocab, merges=pairs, ignore_merges=pre.ignore_merges)
        )
    except Exception as exc:  # tokenizers raises plain Exception on bad vocab/merges
        raise TokenizerError(f"{meta.source}: cannot build BPE tokenizer: {exc}") from exc
    steps: list[pre_tokenizers.PreTokenizer] = []
    if pre.split_digits:
        steps.append(pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"))
    if pre.regex is not None:
        steps.append(pre_tokenizers.Split(Regex(pre.regex), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre.regex is None))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    specials = [
        AddedToken(tokens[i], special=token_types[i] != _TOKEN_TYPE_USER_DEFINED, normalized=False)
        for i in range(len(tokens))
        if token_types[i] in (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_USER_DEFINED, _TOKEN_TYPE_UNKNOWN)
    ]
    tokenizer.add_special_tokens(specials)
    return tokenizer
