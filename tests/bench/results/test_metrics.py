"""Every metric formula, on hand-built records."""

from __future__ import annotations

import numpy as np
import pytest

from kvroute.bench.results import metrics
from kvroute.bench.results.metrics import Slo, stat, summarize
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.engines.base import CacheCounters
from kvroute.errors import UsageError


def rec(
    i: int,
    sched: float,
    sent: float,
    first: float,
    chunks: list[float],
    end: float,
    *,
    n: int | None = None,
    prompt: int = 100,
    cached: int | None = None,
) -> RequestRecord:
    return RequestRecord(
        index=i,
        scheduled_s=sched,
        sent_s=sent,
        first_byte_s=first - 0.01,
        first_token_s=first,
        end_s=end,
        chunk_times_s=chunks,
        completion_tokens=n,
        prompt_tokens=prompt,
        cached_tokens=cached,
    )


def test_per_request_formulas() -> None:
    r = rec(0, 1.0, 1.002, 1.5, [1.5, 1.6, 1.8, 2.1], 2.2, n=7)
    assert metrics.ttft_s(r) == pytest.approx(0.5)
    assert metrics.first_byte_s(r) == pytest.approx(0.49)
    assert metrics.e2e_s(r) == pytest.approx(1.2)
    assert metrics.dispatch_delay_s(r) == pytest.approx(0.002)
    # TPOT uses N from usage (7 tokens in 4 chunks), not the chunk count.
    assert metrics.tpot_s(r) == pytest.approx((2.1 - 1.5) / 6)
    assert metrics.itl_s(r) == pytest.approx([0.1, 0.2, 0.3])
    no_usage = rec(1, 0.0, 0.0, 1.0, [1.0, 1.5, 2.0], 2.0)
    assert metrics.tpot_s(no_usage) == pytest.approx(0.5)
    assert metrics.tpot_s(rec(2, 0.0, 0.0, 1.0, [1.0], 1.0, n=1)) is None


def test_stat_matches_numpy_linear_percentiles() -> None:
    values = [float(v) for v in np.random.default_rng(0).exponential(1.0, 1000)]
    s = stat(values)
    p50, p90, p95, p99 = np.percentile(values, [50, 90, 95, 99])
    assert (s.count, s.p50, s.p90, s.p95, s.p99, s.max) == (1000, p50, p90, p95, p99, max(values))
    assert stat([]).p50 is None


def test_summary_throughput_goodput_rates_cache_and_errors() -> None:
    ok = [
        rec(
            i,
            float(i),
            float(i) + 0.001 * i,
            i + 0.2 + 0.1 * i,
            [i + 0.2 + 0.1 * i, i + 0.5 + 0.1 * i],
            i + 1.0,
            n=10,
            prompt=100,
            cached=80 if i % 2 == 0 else 0,
        )
        for i in range(4)
    ]
    bad = RequestRecord(index=4, scheduled_s=4.0, sent_s=4.0)
    bad.fail(ErrorKind.HTTP_5XX, "HTTP 500", 4.1)
    cancelled = rec(5, 5.0, 5.0, 5.2, [5.2], 5.3, n=1)
    cancelled.outcome = Outcome.CANCELLED
    unsent = RequestRecord(index=6, scheduled_s=9.0, outcome=Outcome.NOT_SENT)
    s = summarize(
        [*ok, bad, cancelled, unsent],
        slo=Slo(ttft_s=0.35),
        engine_cache=CacheCounters(prompt_tokens=400, cached_tokens=160),
    )
    assert (s.num_ok, s.num_errors, s.num_cancelled, s.num_not_sent) == (4, 1, 1, 1)
    assert s.errors == {"http_5xx": 1}
    assert s.duration_s == pytest.approx(5.3)  # first intended send 0.0 to last end 5.3
    assert s.request_throughput_per_s == pytest.approx(4 / 5.3)
    assert s.output_token_throughput_per_s == pytest.approx(40 / 5.3)
    assert s.total_token_throughput_per_s == pytest.approx(440 / 5.3)
    assert s.ttft_s.p50 == pytest.approx(np.percentile([0.2, 0.3, 0.4, 0.5], 50))
    # TTFTs 0.2, 0.3, 0.4, 0.5: two meet 0.35 s, out of 6 sent.
    assert s.goodput is not None and s.goodput.num_good == 2
    assert s.goodput.share == pytest.approx(2 / 6) and s.goodput.per_s == pytest.approx(2 / 5.3)
    # Sent: scheduled 0..5 (span 5), actual 0, 1.001, 2.002, 3.003, 4.0, 5.0 (span 5).
    assert s.rates.scheduled_per_s == pytest.approx(
        1.0
    ) and s.rates.achieved_per_s == pytest.approx(1.0)
    assert s.cache.response_hit_rate == pytest.approx(160 / 400)
    assert s.cache.engine_hit_rate == pytest.approx(0.4)
    assert (s.cache.num_hits, s.cache.num_misses) == (2, 2)
    assert s.ttft_hit_s.count == 2 and s.ttft_miss_s.count == 2
    assert s.ttft_hit_s.p50 == pytest.approx(0.3)  # requests 0 and 2: 0.2 and 0.4
    assert s.structured is None
    assert s.dispatch_delay_s.max == pytest.approx(0.003)


def test_structured_rates() -> None:
    rs = [rec(i, 0, 0, 1, [1], 2, n=1) for i in range(4)]
    rs[0].json_parsed, rs[0].schema_valid = True, True
    rs[1].json_parsed, rs[1].schema_valid = True, False
    rs[2].json_parsed, rs[2].schema_valid = False, False
    s = summarize(rs)
    assert s.structured is not None
    assert (s.structured.num_requests, s.structured.parse_rate, s.structured.valid_rate) == (
        3,
        2 / 3,
        1 / 3,
    )


def test_slo_parse_and_meets() -> None:
    slo = Slo.parse("ttft=500ms, tpot=0.05, e2e=10s")
    assert slo == Slo(ttft_s=0.5, tpot_s=0.05, e2e_s=10.0)
    assert metrics.meets(rec(0, 0, 0, 0.4, [0.4, 0.44], 1.0, n=2), slo)
    assert not metrics.meets(rec(0, 0, 0, 0.4, [0.4, 0.5], 1.0, n=2), slo)  # TPOT 100 ms
    for bad in ("ttft", "speed=1", "ttft=fast", ""):
        with pytest.raises(UsageError):
            Slo.parse(bad)
