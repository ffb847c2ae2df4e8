"""Predicted vs observed cached tokens."""

from __future__ import annotations

import pytest

from kvroute.cache.compare import compare_cached_tokens


def test_compare() -> None:
    c = compare_cached_tokens([10, 0, 16], [10, None, 32], [20, 5, 40], tolerance_tokens=16)
    assert c is not None
    assert c.num_requests == 2 and c.prompt_tokens == 60
    assert c.predicted_tokens == 26 and c.observed_tokens == 42
    assert c.mean_abs_error_tokens == 8.0 and c.bias_tokens == -8.0
    assert c.exact_share == 0.5 and c.within_tolerance_share == 1.0
    assert compare_cached_tokens([1], [None], [3]) is None
    with pytest.raises(ValueError):
        compare_cached_tokens([1], [1, 2], [3])
