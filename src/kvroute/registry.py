"""A small named registry for swappable parts (trace formats, cache models, policies).

Built-ins register through the same path a plugin would. Looking up an unknown name
raises an error that lists the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from kvroute.errors import UsageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to implementations of one kind (``kind`` names it in errors)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name``."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._items[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "none registered"
            raise UsageError(f"unknown {self.kind} '{name}' (valid: {valid})") from None

    def names(self) -> list[str]:
        return list(self._items)

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items
