"""Helpers of the cache models that stay interpreted in the compiled build.

mypyc (``kvroute._accel``) cannot compile subclasses of most built-in types
(``AssertionError``, ``dict``), so they live here rather than in :mod:`kvroute.cache.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvroute.cache.base import Admission


class InvariantViolation(AssertionError):
    """A cache model's internal state broke one of its invariants: a bug in kvroute."""


def check(condition: bool, message: str) -> None:
    """Raise :class:`InvariantViolation` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InvariantViolation(message)


class Admitted(dict[int, "Admission"]):
    """ADMITTED admissions by cached tokens, each built once (``admitted[hit]``): ``pin``
    returns one per request and a frozen dataclass costs microseconds to build. A model
    keeps one of these; the admissions are immutable, so sharing them is safe."""

    def __missing__(self, cached_tokens: int) -> Admission:
        from kvroute.cache.base import Admission, AdmitStatus

        adm = self[cached_tokens] = Admission(AdmitStatus.ADMITTED, cached_tokens)
        return adm
