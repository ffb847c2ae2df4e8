"""``--warmup``: the headline overlap leaves out the leading requests, which still fill
the cache; the figure from an empty cache stays in the result."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.analyze.result import AnalysisResult
from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.analyze.warmup import Warmup, parse_warmup
from kvroute.errors import UsageError
from kvroute.trace.records import Request, TokenPrompt


def _trace() -> list[Request]:
    """Four distinct 32-token prompts at t = 0..3 s, then the same four again at 10..13 s:
    from an empty cache half the tokens are reused, once warm all of them."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 40_000, size=32, dtype=np.uint32) for _ in range(4)]
    times = [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]
    return [Request(prompt=TokenPrompt(prompts[i % 4]), arrival_s=t) for i, t in enumerate(times)]


def _analyze(warmup: Warmup | None) -> AnalysisResult:
    return analyze_requests(
        _trace(),
        trace_path="t",
        trace_format="test",
        tokenizer_name=None,
        options=AnalyzeOptions(warmup=warmup),
    )


def test_parse_warmup() -> None:
    assert parse_warmup("50%") == Warmup(share_requests=0.5)
    assert parse_warmup("10m") == Warmup(duration_s=600.0)
    assert parse_warmup("90") == Warmup(duration_s=90.0)
    assert parse_warmup("500ms") == Warmup(duration_s=0.5)
    assert parse_warmup("1h") == Warmup(duration_s=3600.0)
    for bad in ("100%", "-5%", "x%", "soon", "10 parsecs"):
        with pytest.raises(UsageError, match="--warmup"):
            parse_warmup(bad)


def test_no_warmup_is_the_cold_figure() -> None:
    ov = _analyze(None).overlap
    assert ov.hit_ratio == pytest.approx(0.5)
    assert ov.warmup is None and ov.cold_hit_ratio is None and ov.num_warmup_requests == 0


@pytest.mark.parametrize("warmup", [Warmup(share_requests=0.5), Warmup(duration_s=5.0)])
def test_warm_headline_and_cold_figure(warmup: Warmup) -> None:
    r = _analyze(warmup)
    ov = r.overlap
    assert ov.num_warmup_requests == 4
    assert ov.hit_ratio == pytest.approx(1.0) and ov.block_hit_ratio == pytest.approx(1.0)
    assert ov.prompt_tokens == 4 * 32 and ov.reusable_tokens == 4 * 32
    assert ov.cold_hit_ratio == pytest.approx(0.5) and ov.cold_block_hit_ratio == pytest.approx(0.5)
    assert ov.warmup == str(warmup)
    # the verdict judges the steady state
    assert "100.0 %" in r.verdict.headline


def test_warmup_past_the_trace_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="nothing is left"):
        _analyze(Warmup(duration_s=60.0))


def test_duration_needs_arrival_times() -> None:
    with pytest.raises(UsageError, match="arrival times"):
        Warmup(duration_s=1.0).num_warmup_requests(np.full(3, np.nan))
