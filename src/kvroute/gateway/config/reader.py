"""A typed reader over one mapping of a YAML config: getters that check types and
raise :class:`InputError` at the offending key's line (see yaml_lines.py).

A whole config is checked in one pass: the nodes of one config share a list of
problems; unknown keys go straight to it, and :meth:`ConfigNode.collect` runs one
section or item, records its error and goes on, so ``serve --check`` lists every error
at once (:meth:`ConfigNode.raise_problems`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kvroute.errors import InputError, InputErrors
from kvroute.gateway.config.yaml_lines import LineDict

_HEX64 = re.compile(r"^[0-9a-f]{64}$")

T = TypeVar("T")


class ConfigNode:
    """One mapping of the config and where it is, with typed getters that raise
    :class:`InputError` at the offending key's line."""

    def __init__(
        self,
        data: Any,
        path: str,
        where: str,
        line: int,
        problems: list[InputError] | None = None,
    ) -> None:
        self.problems: list[InputError] = [] if problems is None else problems
        """Errors found so far in this config, shared by every node of it."""
        if data is None:
            data = LineDict()
            data.line, data.key_lines = line, {}
        if not isinstance(data, dict):
            raise InputError(
                f"expected a mapping, got {type(data).__name__}",
                path=path,
                line=line,
                field=where or None,
            )
        self.data: dict[str, Any] = data
        self.path = path
        self.where = where
        self.line = getattr(data, "line", line)
        self._key_lines: dict[str, int] = getattr(data, "key_lines", {})

    def _field(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def error(self, message: str, key: str | None = None) -> InputError:
        line = self._key_lines.get(key, self.line) if key else self.line
        return InputError(
            message,
            path=self.path,
            line=line,
            field=self._field(key) if key else self.where or None,
        )

    def check_keys(self, *allowed: str) -> None:
        """Record every key not in ``allowed`` (the rest of the node is still read)."""
        for key in self.data:
            if key not in allowed:
                self.problems.append(self.error(f"unknown key (valid: {', '.join(allowed)})", key))

    def collect(self, read: Callable[[], T], fallback: T) -> T:
        """``read()``; if it raises :class:`InputError`, record it and return ``fallback``
        so the rest of the config is still checked."""
        try:
            return read()
        except InputError as exc:
            self.problems.append(exc)
            return fallback

    def raise_problems(self) -> None:
        """Raise every recorded error at once, in file order (:class:`InputErrors`)."""
        if self.problems:
            ordered = sorted(self.problems, key=lambda e: e.line or 0)
            raise InputErrors(ordered) if len(ordered) > 1 else ordered[0]

    def child(self, key: str) -> ConfigNode:
        return ConfigNode(
            self.data.get(key),
            self.path,
            self._field(key),
            self._key_lines.get(key, self.line),
            self.problems,
        )

    def items(self, key: str, *, required: bool = False) -> list[ConfigNode]:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.error(f"'{key}' is required")
            return []
        if not isinstance(value, list):
            raise self.error("must be a list", key)
        line = self._key_lines.get(key, self.line)
        return [
            ConfigNode(v, self.path, f"{self._field(key)}[{i}]", line, self.problems)
            for i, v in enumerate(value)
        ]

    def _get(self, key: str, default: Any) -> Any:
        if key not in self.data:
            if default is _REQUIRED:
                raise self.error(f"'{key}' is required")
            return default
        return self.data[key]

    def string(self, key: str, default: str | None = None) -> str:
        value = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(value, str) or not value:
            raise self.error("must be a non-empty string", key)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error("must be a string or a list of strings", key)
        return tuple(value)

    def number(self, key: str, default: float) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"must be a number, got {value!r}", key)
        return float(value)

    def integer(self, key: str) -> int:
        value = self._get(key, _REQUIRED)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"must be an integer, got {value!r}", key)
        return value

    def sha256(self, key: str, *, required: bool) -> str | None:
        if key not in self.data and not required:
            return None
        value = self.string(key).lower()
        if not _HEX64.match(value):
            raise self.error("must be 64 hex digits (kvroute serve --hash-key prints one)", key)
        return value

    def fields(self, cls: type, *, positive: bool = False) -> dict[str, Any]:
        """The keys of a flat section whose dataclass ``cls`` gives names, types
        (from the defaults) and defaults; numbers must be > 0 when ``positive`` (>= 0
        where the default is 0: off). A wrong key is recorded and left at its default."""
        defaults = {name: getattr(cls(), name) for name in cls.__dataclass_fields__}  # type: ignore[attr-defined]
        self.check_keys(*defaults)
        out: dict[str, Any] = {}
        for key, default in defaults.items():
            if key in self.data:
                value = self.collect(partial(self._flat_value, key, default, positive), None)
                if value is not None:
                    out[key] = value
        return out

    def _flat_value(self, key: str, default: Any, positive: bool) -> Any:
        if isinstance(default, bool):
            value = self.data[key]
            if not isinstance(value, bool):
                raise self.error("must be true or false", key)
            return value
        if isinstance(default, int):
            value = self.integer(key)
        elif isinstance(default, float):
            value = self.number(key, default)
        else:
            return self.string(key)
        if positive and (value < 0 if default == 0 else value <= 0) and key != "port":
            raise self.error("must be >= 0" if default == 0 else "must be > 0", key)
        return value


_REQUIRED = object()
