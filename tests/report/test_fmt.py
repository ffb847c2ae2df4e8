"""Formatter outputs at unit boundaries, rounding roll-overs and non-finite input."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvroute.cli.simulate.capacity import parse_tokens
from kvroute.report import fmt


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (1, "1"),
        (950, "950"),
        (999, "999"),
        (999.6, "1k"),  # rounds up into the next prefix, never "1000"
        (1000, "1k"),
        (1200, "1.2k"),
        (12_345, "12.3k"),
        (999_999, "1M"),
        (3.4e6, "3.4M"),
        (1.5e9, "1.5G"),
        (2e18, "2E"),
        (0.25, "0.25"),
        (0.1234, "0.123"),
        (-1500, "-1.5k"),
        (math.nan, "n/a"),
        (math.inf, "∞"),
        (-math.inf, "-∞"),
    ],
)
def test_si(value: float, expected: str) -> None:
    assert fmt.si(value) == expected


def test_si_digits() -> None:
    assert fmt.si(1_234_567, digits=5) == "1.2346M"
    assert fmt.si(1_000_001, digits=7) == "1.000001M"
    with pytest.raises(ValueError, match="digits"):
        fmt.si(1.0, digits=0)


def test_si_beyond_largest_prefix_uses_exponent() -> None:
    assert fmt.si(1e25) == "1e+25"


@given(st.floats(min_value=-1e20, max_value=1e20, allow_nan=False))
def test_si_mantissa_always_below_1000(value: float) -> None:
    text = fmt.si(value)
    match = re.fullmatch(r"-?([0-9.]+(?:e-?\d+)?)([kMGTPE]?)", text)
    assert match is not None, text
    assert abs(float(match.group(1))) < 1000


def test_tokens_and_count() -> None:
    assert fmt.tokens(12_345) == "12.3k"
    assert fmt.tokens(48_200_000) == "48.2M"
    assert fmt.count(0) == "0"
    assert fmt.count(1_234_567) == "1,234,567"


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (0.612, "61.2 %"),
        (0, "0.0 %"),
        (1, "100.0 %"),
        (0.99996, "100.0 %"),
        (0.0004, "0.0 %"),
        (1.5, "150.0 %"),
        (-0.05, "-5.0 %"),
        (math.nan, "n/a"),
    ],
)
def test_percent(fraction: float, expected: str) -> None:
    assert fmt.percent(fraction) == expected


def test_percent_digits() -> None:
    assert fmt.percent(0.12345, digits=2) == "12.35 %"
    assert fmt.percent(0.5, digits=0) == "50 %"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0 s"),
        (5e-10, "0.5 ns"),
        (1.23e-5, "12.3 µs"),
        (0.045, "45 ms"),
        (0.0009999, "1 ms"),  # 999.9 µs rounds up into milliseconds
        (0.9996, "1 s"),
        (1.234, "1.23 s"),
        (59.4, "59.4 s"),
        (59.996, "1 min"),
        (125, "2 min 05 s"),
        (120, "2 min"),
        (7200, "2 h"),
        (3599.6, "1 h"),
        (7380, "2 h 03 min"),
        (86_399.9, "1 d"),
        (90_000, "1 d 01 h"),
        (-0.5, "-500 ms"),
        (math.inf, "∞"),
        (math.nan, "n/a"),
    ],
)
def test_duration(seconds: float, expected: str) -> None:
    assert fmt.duration(seconds) == expected


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1023.9, "1 KiB"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (1_288_490_188, "1.2 GiB"),
        (12.4 * 2**30, "12.4 GiB"),
        (2**40, "1 TiB"),
        (-2048, "-2 KiB"),
        (math.nan, "n/a"),
    ],
)
def test_byte_size(num_bytes: float, expected: str) -> None:
    assert fmt.byte_size(num_bytes) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (950, "950"),
        (1000, "1k"),
        (1024, "1Ki"),
        (3584, "3.5Ki"),
        (64_000, "64k"),
        (65_536, "64Ki"),
        (65_500, "65.5k"),
        (65_537, "65,537"),
        (1_024_000, "1,024,000"),  # 1000Ki: four digits, written in full
        (1_500_000, "1.5M"),
        (1_572_864, "1.5Mi"),
        (2**40, "1Ti"),
        (1.5, "1.5"),
        (math.nan, "n/a"),
    ],
)
def test_capacity(value: float, expected: str) -> None:
    assert fmt.capacity(value) == expected


@given(st.integers(min_value=0, max_value=999 * 1024**4))
def test_capacity_reads_back_exactly_as_a_token_option(num_tokens: int) -> None:
    """What a report prints is what --capacity-tokens / --sweep-sizes read back."""
    text = fmt.capacity(num_tokens)
    assert parse_tokens(text.replace(",", ""), "--capacity-tokens") == num_tokens
    assert len(text.rstrip("kKMGTi")) <= 4 or "," in text  # short (2.25Ki too), or in full


@given(st.sampled_from([1000, 1024]), st.integers(1, 4), st.integers(1, 999))
def test_capacity_prefers_the_short_form(base: int, power: int, mantissa: int) -> None:
    """A size that has a short exact form (125Ki) is never written in full (128k here)."""
    text = fmt.capacity(mantissa * base**power)
    assert "," not in text and len(text.rstrip("kMGTi")) <= 4, text


def test_relative_changes_share_one_precision_style() -> None:
    from kvroute.report.fmt import relative

    assert [relative(x) for x in (-0.883, 0.046, 0.0004, -0.00049, 1.5)] == [
        "-88 %",
        "+4.6 %",
        "±0 %",
        "±0 %",
        "+150 %",
    ]
    assert relative(float("nan")) == "n/a"


def test_unknown_is_n_a_never_zero() -> None:
    from kvroute.report.fmt import percent, tokens

    assert percent(None) == "n/a" and tokens(None) == "n/a"
    assert percent(0.0) == "0.0 %" and tokens(0) == "0"
