"""Chat templates: Jinja2 rendering the way Hugging Face transformers does it.

The environment matches ``transformers``' ``apply_chat_template``: a sandboxed,
immutable Jinja2 environment with ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension, a ``{% generation %}`` block that renders its body,
``tojson`` as plain ``json.dumps`` (no HTML escaping, ``ensure_ascii=False``),
``raise_exception`` and ``strftime_now``. Variables: ``messages``, ``tools`` (``None``
when absent, as transformers passes it), ``add_generation_prompt``, ``bos_token``,
``eos_token``.

One normalisation is added, the one llama.cpp and vLLM apply: a template that only
reads string ``content`` gets OpenAI content-part lists joined into a string (text
parts joined with a newline), and a template that only reads part lists gets strings
wrapped as one text part. Which kind a template reads is probed once, at compile time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvroute.errors import TokenizerError
from kvroute.types import Message

_PROBE = "kvroute-content-probe-7f3a"


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body unchanged.

    transformers uses the block to mark assistant tokens; rendering ignores it.
    """

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it a plain set)

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A compiled chat template. Rendering is pure apart from ``now`` (``strftime_now``)."""

    source: str
    template: jinja2.Template
    reads_string_content: bool
    reads_part_content: bool

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        bos_token: str = "",
        eos_token: str = "",
        now: Callable[[], datetime] = datetime.now,
    ) -> str:
        """Render ``messages`` (and ``tools``) to the prompt text.

        Raises :class:`~kvroute.errors.TokenizerError` when the template raises (its own
        ``raise_exception`` included) or fails on the given messages.
        """
        try:
            return self.template.render(
                messages=self.normalize(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
                strftime_now=lambda fmt: now().strftime(fmt),
            )
        except jinja2.TemplateError as exc:
            raise TokenizerError(f"chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise TokenizerError(
                f"chat template failed on these messages: {type(exc).__name__}: {exc}"
            ) from exc

    def normalize(self, messages: Sequence[Message]) -> list[Message]:
        """Messages with ``content`` in the shape this template reads (copies when changed)."""
        only_string = self.reads_string_content and not self.reads_part_content
        only_parts = self.reads_part_content and not self.reads_string_content
        if not (only_string or only_parts):
            return list(messages)
        out: list[Message] = []
        for message in messages:
            content = message.get("content")
            if only_string and isinstance(content, list):
                out.append({**message, "content": join_text_parts(content)})
            elif only_parts and isinstance(content, str):
                out.append({**message, "content": [{"type": "text", "text": content}]})
            else:
                out.append(message)
        return out


def join_text_parts(parts: Sequence[Any]) -> str:
    """OpenAI content parts as one string: text parts joined by newlines, others dropped."""
    return "\n".join(
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    )


def make_environment() -> ImmutableSandboxedEnvironment:
    """A fresh Jinja2 environment configured as transformers configures its own."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env


def compile_chat_template(source: str) -> ChatTemplate:
    """Compile ``source`` and probe which content shapes it reads.

    Raises :class:`~kvroute.errors.TokenizerError` on a syntax error.
    """
    try:
        template = make_environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TokenizerError(f"chat template does not compile: {exc} (line {exc.lineno})") from exc
    return ChatTemplate(
        source=source,
        template=template,
        reads_string_content=_probe(template, _PROBE),
        reads_part_content=_probe(template, [{"type": "text", "text": _PROBE}]),
    )


def _probe(template: jinja2.Template, content: Any) -> bool:
    """Whether the probe text reaches the output, as text, when passed as ``content``.

    A part list that reaches the output only as its Python repr (``[{'type': 'text', ...``,
    what ``{{ message['content'] }}`` makes of a list) does not count.
    """
    try:
        rendered = template.render(
            messages=[{"role": "user", "content": content}],
            tools=None,
            add_generation_prompt=False,
            bos_token="",
            eos_token="",
            strftime_now=lambda fmt: "",
        )
    except Exception:
        # A template may reject the probe in any way it likes; that only means "no".
        return False
    return _PROBE in rendered and "'text'" not in rendered
