"""Number formatters shared by the HTML, SVG and terminal reports.

Pure functions, number in and ``str`` out. They never raise on a bad measurement: NaN
formats as ``"n/a"`` and infinities as ``"∞"`` / ``"-∞"``, so one broken value cannot take
a whole report down. Rounding never produces an out-of-range mantissa: a value that rounds
up to the next unit moves to it (``999_999`` is ``"1M"``, not ``"1000k"``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

_SI_PREFIXES = ("", "k", "M", "G", "T", "P", "E")
_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

VALUE_SPACES = re.compile(
    r"(?<=\d) (?=(?:%|pp|[nµm]?s|min|h|d|[KMGT]i?B|tokens?|req/s|x|×|[kM]i?)(?:\W|$))"
    r"|(?:(?<=\bmin)|(?<=\bh)|(?<=\bd)|(?<=\bCPU)|(?<=\bCPUs)) (?=\d)"
    r"| (?=/ )|(?<= /) "
)
"""Spaces inside a value these formatters write, where no line may break: ``57.0 %``,
``93.1 ms``, ``2 min 05 s``, ``+4.6 pp``, ``CPUs 0-1``, ``p50 / p90`` (the terminal's
:class:`~kvroute.report.console_fit.Prose` and the pages'
:func:`~kvroute.report.page.escape.prose` both keep them)."""


def _non_finite(value: float) -> str | None:
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return None


def _significant(magnitude: float, digits: int) -> str:
    """``magnitude`` (> 0) rounded to ``digits`` significant digits, trailing zeros dropped."""
    decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
    text = f"{magnitude:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _scaled(magnitude: float, base: float, units: tuple[str, ...], digits: int) -> tuple[str, str]:
    """Mantissa text and unit for ``magnitude`` (>= 0) on a ``base``-step unit ladder."""
    for index, unit in enumerate(units):
        text = _significant(magnitude / base**index, digits) if magnitude else "0"
        if float(text) < base or index == len(units) - 1:
            return text, unit
    raise AssertionError("unreachable: the loop returns on the last unit")


def si(value: float, *, digits: int = 3) -> str:
    """``value`` with an SI suffix and at most ``digits`` significant digits.

    ``950 -> "950"``, ``1200 -> "1.2k"``, ``12_345 -> "12.3k"``, ``3.4e6 -> "3.4M"``,
    ``0.25 -> "0.25"``, ``-1500 -> "-1.5k"``. Values past the ``E`` prefix use exponent
    notation. Raises ``ValueError`` if ``digits < 1``.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    special = _non_finite(value)
    if special is not None:
        return special
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if magnitude < 1:
        return sign + f"{magnitude:.{digits}g}"
    text, prefix = _scaled(magnitude, 1000.0, _SI_PREFIXES, digits)
    if float(text) >= 1000:
        return f"{value:.{digits}g}"
    return f"{sign}{text}{prefix}"


def tokens(num_tokens: float | None) -> str:
    """A token count, compact: ``12_345 -> "12.3k"`` (same rules as :func:`si`); unknown
    (None) is ``"n/a"``, never 0."""
    return "n/a" if num_tokens is None else si(num_tokens)


def capacity(num_tokens: float) -> str:
    """A KV capacity in tokens, exactly, in the notation ``--capacity-tokens`` and
    ``--sweep-sizes`` read: ``k``, ``M``, ``G`` are powers of 1000 and ``Ki``, ``Mi``,
    ``Gi`` powers of 1024, with at most three significant digits; any other size is
    written in full.

    ``64_000 -> "64k"``, ``65_536 -> "64Ki"``, ``1_500_000 -> "1.5M"``,
    ``3_584 -> "3.5Ki"``, ``950 -> "950"``, ``65_537 -> "65,537"``. A value that is not
    a whole number falls back to :func:`tokens`.
    """
    if not math.isfinite(num_tokens) or num_tokens != int(num_tokens):
        return tokens(num_tokens)
    n = int(num_tokens)
    if abs(n) < 1000:
        return str(n)
    for base in (1000, 1024):
        # up to T: the token options read no larger prefix, and P would not read back
        for power, prefix in enumerate(_SI_PREFIXES[1:5], start=1):
            mantissa = _short_exact(Fraction(abs(n), base**power))
            if mantissa is not None:
                unit = prefix if base == 1000 else f"{prefix.upper()}i"
                return f"{'-' if n < 0 else ''}{mantissa}{unit}"
    return count(n)


def _short_exact(mantissa: Fraction) -> str | None:
    """``mantissa`` written exactly with at most three significant digits, if it is in
    [1, 1000) and can be; else None."""
    if not 1 <= mantissa < 1000:
        return None
    for decimals in range(3):
        scaled = mantissa * 10**decimals
        if scaled.denominator == 1:
            digits = str(scaled.numerator)
            if len(digits) > 3:
                return None
            return str(Decimal(scaled.numerator).scaleb(-decimals))
    return None


def count(n: int) -> str:
    """An exact count with thousands separators: ``1234567 -> "1,234,567"``."""
    return f"{n:,}"


def percent(fraction: float | None, *, digits: int = 1) -> str:
    """A fraction as a percentage with ``digits`` decimals: ``0.612 -> "61.2 %"``;
    unknown (None) is ``"n/a"``, never ``0.0 %``."""
    if fraction is None:
        return "n/a"
    special = _non_finite(fraction)
    if special is not None:
        return special
    return f"{fraction * 100:.{digits}f} %"


def duration(seconds: float) -> str:
    """A duration, unit chosen by size, three significant digits below a minute.

    ``0.0000123 -> "12.3 µs"``, ``0.045 -> "45 ms"``, ``1.234 -> "1.23 s"``,
    ``125 -> "2 min 05 s"``, ``120 -> "2 min"``, ``7380 -> "2 h 03 min"``, ``90000 -> "1 d 01 h"``.
    """
    special = _non_finite(seconds)
    if special is not None:
        return special
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds == 0:
        return "0 s"
    for scale, unit in ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s")):
        if seconds < scale * 1000 or unit == "s":
            text = _significant(seconds / scale, 3)
            limit = 60 if unit == "s" else 1000
            if float(text) < limit:
                return f"{text} {unit}"
    # A whole number of the larger unit drops the zero ("2 min", not "2 min 00 s").
    whole_s = round(seconds)
    minutes, secs = divmod(whole_s, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s" if secs else f"{minutes} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min" if minutes else f"{hours} h"
    days, hours = divmod(round(seconds / 3600), 24)
    return f"{days} d {hours:02d} h" if hours else f"{days} d"


def byte_size(num_bytes: float) -> str:
    """A size in binary units, three significant digits: ``1288490188 -> "1.2 GiB"``."""
    special = _non_finite(num_bytes)
    if special is not None:
        return special
    sign = "-" if num_bytes < 0 else ""
    text, unit = _scaled(abs(num_bytes), 1024.0, _BINARY_UNITS, 3)
    return f"{sign}{text} {unit}"


def plural(num: int, noun: str, nouns: str | None = None) -> str:
    """A count and its noun, singular for one: ``1 backend``, ``2 backends``, ``1,024
    blocks``; ``nouns`` when the plural is not the noun plus ``s`` (``prefixes``)."""
    return f"{count(num)} {noun if num == 1 else nouns or noun + 's'}"


def relative(fraction: float) -> str:
    """A relative change, signed, one decimal below 10 % and none above: ``-0.883 ->
    "-88 %"``, ``0.046 -> "+4.6 %"``; a change that rounds to nothing is ``"±0 %"``."""
    special = _non_finite(fraction)
    if special is not None:
        return special
    pct = fraction * 100
    text = f"{pct:+.1f}" if abs(pct) < 10 else f"{pct:+.0f}"
    return "±0 %" if float(text) == 0 else f"{text} %"
