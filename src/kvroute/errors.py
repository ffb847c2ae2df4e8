"""One exception tree for kvroute.

Every error a user can cause derives from :class:`KvrouteError`. Boundaries turn them
into messages at one place each: the CLI maps them to one line and an exit code, the
gateway to OpenAI-style error JSON. ``exit_code`` is the CLI's documented code.
"""

from __future__ import annotations

from collections.abc import Sequence


class KvrouteError(Exception):
    """Base of every error kvroute raises on purpose. ``hint`` says how to fix it."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message} ({self.hint})"


class UsageError(KvrouteError):
    """Wrong options or arguments."""

    exit_code = 2


class InputError(KvrouteError):
    """A trace or log could not be read. Carries the place: file, line, field."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = ":".join(str(p) for p in (path, line) if p is not None)
        parts = [where] if where else []
        if field:
            parts.append(f"field '{field}'")
        prefix = ", ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message, hint=hint)
        self.bare_message = message


class InputErrors(InputError):
    """Several input errors found in one pass (a config checked whole), in file order;
    the CLI prints each on its own ``error:`` line. Its own place is the first one's."""

    def __init__(self, errors: Sequence[InputError]) -> None:
        if not errors:
            raise ValueError("InputErrors needs at least one error")
        first = errors[0]
        super().__init__(
            first.bare_message, path=first.path, line=first.line, field=first.field, hint=first.hint
        )
        self.errors = tuple(errors)
        self.message = "; ".join(e.message for e in self.errors)


class EmptyTraceError(InputError):
    """The trace held no usable request."""


class TokenizerError(KvrouteError):
    """The tokenizer or chat template could not be loaded or applied."""

    exit_code = 4


class EngineError(KvrouteError):
    """A local engine could not be installed, started, reached or stopped."""

    exit_code = 5
