"""The model's tokenizer and chat template, producing token ids as the engine sees them.

:func:`load_tokenizer` builds a :class:`ChatTokenizer` from a GGUF file (the default:
SmolLM2-135M-Instruct, the model kvroute's engines serve) or from a Hugging Face
tokenizer directory. For GGUF the byte-level BPE is rebuilt from the file's metadata
(:mod:`kvroute.trace.gguf_bpe`: llama.cpp's split for the file's ``tokenizer.ggml.pre``).
:meth:`ChatTokenizer.encode` matches llama-server's prompt tokenization (``add_special`` and ``parse_special`` both true): BOS/EOS only where the
model asks for them. :meth:`ChatTokenizer.encode_output` matches how a generated answer
counts: no BOS/EOS, control tokens as plain text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from kvroute.errors import TokenizerError
from kvroute.trace.chat_template import ChatTemplate, compile_chat_template
from kvroute.trace.gguf import GGUFMetadata, read_gguf_metadata
from kvroute.trace.gguf_bpe import bpe_from_gguf, pre_type, supported_pre_types
from kvroute.trace.pretokenize import AsciiWordEncoder, WordSplit
from kvroute.types import Message, TokenIds

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "run `scripts/install-engines model` to install the default model"


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
        hint = (
            INSTALL_HINT
            if source is None
            else "give a GGUF model file or a Hugging Face tokenizer directory (with "
            "tokenizer.json), or leave the tokenizer out for the default model"
        )
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
    pre = pre_type(pre_name)
    if pre is None:
        raise TokenizerError(
            f"{path}: pre-tokenizer type '{pre_name}' is not supported",
            hint="supported: " + ", ".join(supported_pre_types()),
        )
    tokenizer = bpe_from_gguf(meta, pre)
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
