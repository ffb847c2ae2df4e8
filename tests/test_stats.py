from __future__ import annotations

import math

import numpy as np

from kvroute.stats import describe, percentile


def test_percentile_is_the_one_describe_uses() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, math.nan]
    d = describe(values)
    assert percentile(values, 0.5) == d.p50 == 3.5
    assert percentile(values, 0.99) == d.p99
    assert percentile(np.array([7.0]), 0.99) == 7.0


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 0.5) is None
    assert percentile([math.inf], 0.5) is None
