"""The model's tokenizer and chat template, producing token ids as the engine sees them.

:func:`load_tokenizer` builds a :class:`ChatTokenizer` from a GGUF file (the default:
SmolLM2-135M-Instruct, the model kvroute's engines serve) or from a Hugging Face
tokenizer directory. For GGUF the byte-level BPE is rebuilt with the ``tokenizers``
library from the file's metadata, configured to split text exactly as llama.cpp's
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
``tokenizers`` leftmost-longest; the two differ only for overlapping special tokens.) :meth:`ChatTokenizer.encode` matches llama-server's prompt
tokenization (``add_special`` and ``parse_special`` both true): BOS/EOS only where the
model asks for them. :meth:`ChatTokenizer.encode_output` matches how a generated answer
counts: no BOS/EOS, control tokens as plain text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from kvroute.errors import TokenizerError
from kvroute.trace.chat_template import ChatTemplate, compile_chat_template
from kvroute.trace.gguf import GGUFMetadata, read_gguf_metadata
from kvroute.trace.pretokenize import AsciiWordEncoder, WordSplit
from kvroute.types import Message, TokenIds

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "run `scripts/install-engines model` to install the default model"

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
class _PreType:
    """How llama.cpp pre-tokenizes one family of ``tokenizer.ggml.pre`` values."""

    regex: str | None  # None: the GPT-2 regex built into ByteLevel
    split_digits: bool
    ignore_merges: bool = False
    add_bos_default: bool = False


_GPT2 = _PreType(regex=None, split_digits=False)
_SMOLLM = _PreType(regex=None, split_digits=True)
_LLAMA3 = _PreType(_LLAMA3_REGEX, split_digits=False, ignore_merges=True, add_bos_default=True)
_LLAMA3_RANKED = _PreType(regex=_LLAMA3_REGEX, split_digits=False)
_QWEN2 = _PreType(regex=_QWEN2_REGEX, split_digits=False)

# tokenizer.ggml.pre values -> llama.cpp's handling (llama-vocab.cpp, llama_vocab::impl::load).
_PRE_FAMILIES: tuple[tuple[_PreType, str], ...] = (
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
    return sorted(name for _, names in _PRE_FAMILIES for name in names.split())


def _pre_type(name: str) -> _PreType | None:
    for pre, names in _PRE_FAMILIES:
        if name in names.split():
            return pre
    return None


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """kvroute's cache: ``$KVROUTE_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/kvroute``."""
    env = os.environ if env is None else env
    if env.get("KVROUTE_CACHE"):
        return Path(env["KVROUTE_CACHE"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base).expanduser() / "kvroute"


def default_model_path(env: Mapping[str, str] | None = None) -> Path:
    """The default model: ``$KVROUTE_MODEL``, else the SmolLM2 GGUF under :func:`cache_dir`.

    The path need not exist; :func:`load_tokenizer` says how to install it when it does not.
    """
    env = os.environ if env is None else env
    if env.get("KVROUTE_MODEL"):
        return Path(env["KVROUTE_MODEL"]).expanduser()
    return cache_dir(env) / "models" / DEFAULT_MODEL_FILE


class ChatTokenizer:
    """A model's tokenizer plus its chat template.

    ``prefix_ids``/``suffix_ids`` are the ids :meth:`encode` adds around every text
    (BOS/EOS where the model asks for them). Methods only read state, apart from the
    output tokenizer :meth:`encode_output` builds once on first use (idempotent), so one
    instance can serve several threads.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        name: str,
        chat_template: str | None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        prefix_ids: Sequence[int] = (),
        suffix_ids: Sequence[int] = (),
        now: Callable[[], datetime] = datetime.now,
        word_split: WordSplit | None = None,
    ) -> None:
        self.name = name
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.prefix_ids: TokenIds = np.asarray(prefix_ids, dtype=np.uint32)
        self.suffix_ids: TokenIds = np.asarray(suffix_ids, dtype=np.uint32)
        self._tokenizer = tokenizer
        self._output_tokenizer: Tokenizer | None = None
        self._template: ChatTemplate | None = (
            compile_chat_template(chat_template) if chat_template else None
        )
        self._now = now
        self._word_split = word_split

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        size: int = self._tokenizer.get_vocab_size(with_added_tokens=True)
        return size

    @property
    def chat_template(self) -> str | None:
        return None if self._template is None else self._template.source

    @property
    def backend(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer`` (do not mutate)."""
        return self._tokenizer

    def token_to_id(self, token: str) -> int | None:
        token_id: int | None = self._tokenizer.token_to_id(token)
        return token_id

    def render_chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt text the model's chat template makes of ``messages`` and ``tools``.

        As llama-server does, a leading BOS text is dropped when :meth:`encode` adds BOS
        itself (and a trailing EOS text when it adds EOS), so the text encodes to one BOS.
        Raises :class:`~kvroute.errors.TokenizerError` if the model has no chat template
        or the template fails.
        """
        if self._template is None:
            raise TokenizerError(f"{self.name}: the model has no chat template")
        text = self._template.render(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
            now=self._now,
        )
        if self.prefix_ids.size and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token) :]
        if self.suffix_ids.size and self.eos_token and text.endswith(self.eos_token):
            text = text[: -len(self.eos_token)]
        return text

    def encode(self, text: str) -> TokenIds:
        """Token ids of a prompt text: special tokens parsed, BOS/EOS as the model asks."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        return self._wrap(np.asarray(ids, dtype=np.uint32))

    def encode_batch(self, texts: Sequence[str]) -> list[TokenIds]:
        """:meth:`encode` for many texts at once, in parallel on the library's thread pool."""
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [self._wrap(np.asarray(e.ids, dtype=np.uint32)) for e in encodings]

    def encode_chat(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> TokenIds:
        """Token ids of the chat prompt, generation prompt included (what the engine prefills)."""
        return self.encode(self.render_chat(messages, tools))

    def encode_output(self, texts: Sequence[str]) -> list[TokenIds]:
        """Token ids of generated answers: no BOS/EOS, control-token text left as text."""
        if self._output_tokenizer is None:
            # A copy with control tokens off, as llama.cpp's parse_special=false: built on
            # first use so prompt-only callers never pay for it.
            output_tokenizer = Tokenizer.from_str(self._tokenizer.to_str())
            output_tokenizer.encode_special_tokens = True
            self._output_tokenizer = output_tokenizer
        encodings = self._output_tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encodings]

    def decode(self, ids: Sequence[int] | TokenIds) -> str:
        """Text of ``ids``, special tokens included as their text."""
        text: str = self._tokenizer.decode(
            np.asarray(ids, dtype=np.uint32).tolist(), skip_special_tokens=False
        )
        return text

    def ascii_word_encoder(self) -> AsciiWordEncoder | None:
        """A new memoising encoder for plain-ASCII text without added tokens (exactly
        ``backend.encode(text, add_special_tokens=False)``), or None when this
        tokenizer's split is not one kvroute knows (a HF tokenizer directory)."""
        if self._word_split is None:
            return None
        return AsciiWordEncoder(self._tokenizer, self._word_split)

    def _wrap(self, ids: TokenIds) -> TokenIds:
        if not self.prefix_ids.size and not self.suffix_ids.size:
            return ids
        return np.concatenate((self.prefix_ids, ids, self.suffix_ids))

    def __repr__(self) -> str:
        return f"ChatTokenizer(name={self.name!r}, vocab_size={self.vocab_size})"


def load_tokenizer(source: str | Path | None = None) -> ChatTokenizer:
    """Load a :class:`ChatTokenizer` from a GGUF file, a HF tokenizer directory, or the default.

    ``None`` means :func:`default_model_path`. Raises :class:`~kvroute.errors.TokenizerError`
    when the source is missing, unreadable, or of an unsupported kind.
    """
    path = default_model_path() if source is None else Path(source).expanduser()
    if not path.exists():
        hint = INSTALL_HINT if source is None else None
        raise TokenizerError(f"tokenizer source not found: {path}", hint=hint)
    if path.is_dir():
        return _from_hf_dir(path)
    return _from_gguf(path)


def _from_gguf(path: Path) -> ChatTokenizer:
    meta = read_gguf_metadata(path)
    model = meta.get_str("tokenizer.ggml.model")
    if model != "gpt2":
        raise TokenizerError(
            f"{path}: tokenizer model '{model}' is not supported (only byte-level BPE, 'gpt2')"
        )
    pre_name = meta.get_str("tokenizer.ggml.pre", "default")
    pre = _pre_type(pre_name)
    if pre is None:
        raise TokenizerError(
            f"{path}: pre-tokenizer type '{pre_name}' is not supported",
            hint="supported: " + ", ".join(supported_pre_types()),
        )
    tokenizer = _bpe_from_gguf(meta, pre)
    tokens = meta.get_str_list("tokenizer.ggml.tokens")
    bos_id = _optional_id(meta, "tokenizer.ggml.bos_token_id", len(tokens))
    eos_id = _optional_id(meta, "tokenizer.ggml.eos_token_id", len(tokens))
    add_bos = meta.get_bool("tokenizer.ggml.add_bos_token", pre.add_bos_default)
    add_eos = meta.get_bool("tokenizer.ggml.add_eos_token", False)
    if add_bos and bos_id is None:
        raise TokenizerError(f"{path}: the model asks for a BOS token but names none")
    if add_eos and eos_id is None:
        raise TokenizerError(f"{path}: the model asks for an EOS token but names none")
    return ChatTokenizer(
        tokenizer,
        name=path.stem,
        chat_template=meta.get_str("tokenizer.chat_template", "") or None,
        bos_token=None if bos_id is None else tokens[bos_id],
        eos_token=None if eos_id is None else tokens[eos_id],
        prefix_ids=[bos_id] if add_bos and bos_id is not None else [],
        suffix_ids=[eos_id] if add_eos and eos_id is not None else [],
        word_split=WordSplit(pre.regex, pre.split_digits),
    )


def _optional_id(meta: GGUFMetadata, key: str, vocab_size: int) -> int | None:
    if key not in meta:
        return None
    token_id = meta.get_int(key)
    # llama.cpp ignores out-of-range special ids the same way.
    return token_id if 0 <= token_id < vocab_size else None


def _bpe_from_gguf(meta: GGUFMetadata, pre: _PreType) -> Tokenizer:
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


def _from_hf_dir(path: Path) -> ChatTokenizer:
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise TokenizerError(f"{path}: no tokenizer.json in this directory")
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:  # tokenizers raises plain Exception on a bad file
        raise TokenizerError(f"{tokenizer_file}: cannot load: {exc}") from exc
    config = _read_json(path / "tokenizer_config.json")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is None and (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text(encoding="utf-8")
    prefix, suffix = _post_processor_ids(tokenizer)
    return ChatTokenizer(
        tokenizer,
        name=path.name,
        chat_template=template if isinstance(template, str) else None,
        bos_token=_token_text(config.get("bos_token")),
        eos_token=_token_text(config.get("eos_token")),
        prefix_ids=prefix,
        suffix_ids=suffix,
    )


def _post_processor_ids(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer's post-processor adds before and after a single text."""
    bare = tokenizer.encode("a", add_special_tokens=False).ids
    full = tokenizer.encode("a", add_special_tokens=True).ids
    start = _find(full, bare)
    if start is None:
        return [], []
    return full[:start], full[start + len(bare) :]


def _find(haystack: list[int], needle: list[int]) -> int | None:
    for i in range(len(haystack) - len(needle) + 1):
        if haystack[i : i + len(needle)] == needle:
            return i
    return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # serialized AddedToken
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data
