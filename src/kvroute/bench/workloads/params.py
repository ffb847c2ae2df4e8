"""Workload parameters: the fields of each generator's dataclass, documented in place.

Every field carries ``metadata={"doc": ...}`` (use :func:`param`). The CLI's
``--param name=value`` strings are converted with :func:`from_params` to the field's
type; an unknown name or a bad value is a :class:`~kvroute.errors.UsageError` that lists
the valid names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_type_hints

from kvroute.errors import UsageError

T = TypeVar("T")


def param(default: Any, doc: str) -> Any:
    """A dataclass field with a default and a one-line description."""
    return dataclasses.field(default=default, metadata={"doc": doc})


def _user_fields(cls: type[Any]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


@dataclass(frozen=True, slots=True)
class ParamInfo:
    name: str
    type_name: str
    default: Any
    doc: str


def describe(cls: type[Any]) -> list[ParamInfo]:
    """The documented parameters of a workload class, in declaration order."""
    hints = get_type_hints(cls)
    return [
        ParamInfo(
            f.name,
            getattr(hints[f.name], "__name__", str(hints[f.name])),
            f.default,
            f.metadata.get("doc", ""),
        )
        for f in _user_fields(cls)
    ]


def _convert(raw: str, kind: Any, name: str) -> Any:
    try:
        if kind is bool:
            low = raw.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(raw)
            return low in ("1", "true", "yes")
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is str:
            return raw
    except ValueError:
        raise UsageError(f"parameter '{name}': {raw!r} is not a valid {kind.__name__}") from None
    raise UsageError(f"parameter '{name}' cannot be set from the command line")


def from_params(cls: type[T], values: Mapping[str, str], *, workload: str, **internals: Any) -> T:
    """An instance of ``cls`` with ``values`` (strings) converted to its field types;
    ``internals`` set fields marked ``metadata={"internal": True}`` (set by the
    registry, never user parameters, never listed)."""
    hints = get_type_hints(cls)
    names = [f.name for f in _user_fields(cls)]
    kwargs: dict[str, Any] = dict(internals)
    for key, raw in values.items():
        if key not in names:
            valid = ", ".join(names) or "none"
            raise UsageError(f"workload '{workload}' has no parameter '{key}' (valid: {valid})")
        kwargs[key] = _convert(raw, hints[key], key)
    return cls(**kwargs)


def check(condition: bool, message: str) -> None:
    """Raise :class:`UsageError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise UsageError(message)
