"""What every stand-in module hands out: names that exist and fail when used."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn


def unavailable(qualname: str) -> Callable[..., NoReturn]:
    """A callable named ``qualname`` that raises ``NotImplementedError`` naming itself."""

    def stand_in(*args: object, **kwargs: object) -> NoReturn:
        raise NotImplementedError(
            f"{qualname} is not available: this is kvroute's stand-in for torchvision, "
            "enough for SGLang to start and serve text models"
        )

    stand_in.__name__ = stand_in.__qualname__ = qualname.rsplit(".", 1)[-1]
    return stand_in


def module_getattr(module: str) -> Callable[[str], object]:
    """A module ``__getattr__``: dunder lookups stay AttributeErrors (import machinery
    probes them), any other name is a stand-in that fails when called."""

    def getattr_(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return unavailable(f"{module}.{name}")

    return getattr_
