"""Whether a trace's model names plausibly name the model a tokenizer belongs to.

Token counts, and so every overlap figure, depend on the tokenizer and chat template:
a trace of requests for one model tokenized with another's tokenizer measures the
wrong prompts. Names are compared loosely, since the same model goes by many:
``HuggingFaceTB/SmolLM2-135M-Instruct``, ``smollm2-135m-instruct``,
``SmolLM2-135M-Instruct.Q4_1.gguf`` and ``SmolLM2-135M-Instruct-hf`` are one model.
"""

from __future__ import annotations

import re

_EXTENSION = re.compile(r"\.(gguf|bin|safetensors|json)$")
_SUFFIX = re.compile(
    r"[-_.](i?q\d+(_[a-z0-9]+)*|f16|f32|bf16|fp16|fp8|int4|int8|awq|gptq|gguf|hf|mlx)$"
)
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def name_parts(name: str) -> list[str]:
    """The words of a model name that identify it: lower case, without an organisation
    or directory prefix, a file extension or quantisation / format suffixes."""
    base = name.strip().lower().rstrip("/").rsplit("/", 1)[-1]
    base = _EXTENSION.sub("", base)
    while (stripped := _SUFFIX.sub("", base)) != base:
        base = stripped
    return [p for p in _SEPARATORS.split(base) if p]


def _contains(outer: list[str], inner: list[str]) -> bool:
    n = len(inner)
    return any(outer[i : i + n] == inner for i in range(len(outer) - n + 1))


def names_match(tokenizer_name: str, model: str) -> bool:
    """True when one name's words are a run of the other's (``llama-3.1-8b`` matches
    ``Meta-Llama-3.1-8B-Instruct-Q4_K_M``); a name with no words matches nothing."""
    a, b = name_parts(tokenizer_name), name_parts(model)
    if not a or not b:
        return False
    return _contains(a, b) if len(a) >= len(b) else _contains(b, a)


def mismatched_models(tokenizer_name: str, models: dict[str, int]) -> dict[str, int]:
    """The models (with their request counts) that ``tokenizer_name`` does not plausibly
    belong to, most requests first."""
    other = {m: n for m, n in models.items() if not names_match(tokenizer_name, m)}
    return dict(sorted(other.items(), key=lambda kv: (-kv[1], kv[0])))


def tokenizer_warning(tokenizer_name: str | None, models: dict[str, int]) -> str | None:
    """The warning every report carries (terminal, JSON, HTML; analyze and simulate)
    when the trace's requests name models ``tokenizer_name`` does not plausibly belong
    to: token counts, and so every overlap figure, are then not the engine's (a default
    tokenizer's own system prompt even shows up as a shared prefix). None when they
    match, or when nothing was tokenized here (``tokenizer_name`` None)."""
    if tokenizer_name is None:
        return None
    other = mismatched_models(tokenizer_name, models)
    if not other:
        return None
    named = ", ".join(
        f"{m} ({n:,} request{'' if n == 1 else 's'})" for m, n in list(other.items())[:3]
    )
    more = f" and {len(other) - 3} more" if len(other) > 3 else ""
    return (
        f"token counts come from tokenizer {tokenizer_name}, but the trace's requests are for "
        f"{named}{more}: prompt lengths and shared prefixes are another model's; pass the "
        "model's tokenizer with --tokenizer PATH (a .gguf file or a Hugging Face tokenizer "
        "directory)"
    )
