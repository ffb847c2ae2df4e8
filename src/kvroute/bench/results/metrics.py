"""The benchmark's figures, each a formula over request records (docs/bench.md defines
them and maps them to vLLM, SGLang and GuideLLM names).

Per request (times from the record, all seconds; ``sched`` is the intended send time):

=================  ============================================================
TTFT               first token − sched (first chunk with content, reasoning or a
                   tool-call delta; role-only chunks excluded)
first byte         first byte − sched (the response head)
TPOT               (last token − first token) / (N − 1), N = usage
                   completion_tokens (content chunks when usage is missing);
                   undefined for N < 2
ITL                each gap between consecutive content chunks
E2E                end − sched
dispatch delay     sent − sched (how late the client sent it)
=================  ============================================================

Over a run: percentiles P50/P90/P95/P99 (linear interpolation, numpy's default, as
vLLM's benchmark) and max of successful requests; throughputs over the run's
duration (first intended send to last end); goodput counts successful requests that
meet every SLO given.

Pure: plain records in, plain dataclasses out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.bench.results.record import Outcome, RequestRecord
from kvroute.engines.base import CacheCounters
from kvroute.errors import UsageError

HIT_SHARE = 0.5
"""A request counts as a cache hit when the engine reports at least this share of its
prompt tokens as cached."""


@dataclass(frozen=True, slots=True)
class Stat:
    """Summary of a sample; every field None when it is empty."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None


def stat(values: Iterable[float]) -> Stat:
    v = np.fromiter(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Stat(0, None, None, None, None, None, None)
    p50, p90, p95, p99 = (float(x) for x in np.percentile(v, [50, 90, 95, 99]))
    return Stat(int(v.size), float(v.mean()), p50, p90, p95, p99, float(v.max()))


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives; a request meets them when each given bound holds."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    @classmethod
    def parse(cls, spec: str) -> Slo:
        """``"ttft=500ms,tpot=50ms,e2e=10s"`` (a bare number is seconds)."""
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, raw = part.partition("=")
            name = name.strip().lower()
            if not sep or name not in ("ttft", "tpot", "e2e"):
                raise UsageError(
                    f"bad SLO {part!r}", hint="use ttft=…,tpot=…,e2e=… (e.g. ttft=500ms)"
                )
            match = re.fullmatch(r"\s*([0-9.]+(?:e-?\d+)?)\s*(ms|s)?\s*", raw)
            if match is None:
                raise UsageError(f"bad SLO value {raw!r} for {name}", hint="a number with ms or s")
            value = float(match.group(1)) * (1e-3 if match.group(2) == "ms" else 1.0)
            values[f"{name}_s"] = value
        if not values:
            raise UsageError("empty SLO", hint="use ttft=…,tpot=…,e2e=…")
        return cls(**values)


def ttft_s(rec: RequestRecord) -> float | None:
    return None if rec.first_token_s is None else rec.first_token_s - rec.scheduled_s


def first_byte_s(rec: RequestRecord) -> float | None:
    return None if rec.first_byte_s is None else rec.first_byte_s - rec.scheduled_s


def e2e_s(rec: RequestRecord) -> float | None:
    return None if rec.end_s is None else rec.end_s - rec.scheduled_s


def dispatch_delay_s(rec: RequestRecord) -> float | None:
    return None if rec.sent_s is None else rec.sent_s - rec.scheduled_s


def num_output_tokens(rec: RequestRecord) -> int:
    """N: usage ``completion_tokens``, else the number of content chunks."""
    return rec.completion_tokens if rec.completion_tokens is not None else len(rec.chunk_times_s)


def tpot_s(rec: RequestRecord) -> float | None:
    n = num_output_tokens(rec)
    if n < 2 or not rec.chunk_times_s:
        return None
    return (rec.chunk_times_s[-1] - rec.chunk_times_s[0]) / (n - 1)


def itl_s(rec: RequestRecord) -> list[float]:
    t = rec.chunk_times_s
    return [b - a for a, b in itertools.pairwise(t)]


def cache_share(rec: RequestRecord) -> float | None:
    """Engine-reported cached share of the prompt, when the response said."""
    if rec.cached_tokens is None or not rec.prompt_tokens:
        return None
    return rec.cached_tokens / rec.prompt_tokens


def meets(rec: RequestRecord, slo: Slo) -> bool:
    """Successful and within every bound given (TPOT is vacuous below two tokens)."""
    if rec.outcome is not Outcome.OK:
        return False
    for bound, value in ((slo.ttft_s, ttft_s(rec)), (slo.e2e_s, e2e_s(rec))):
        if bound is not None and (value is None or value > bound):
            return False
    tpot = tpot_s(rec)
    return slo.tpot_s is None or tpot is None or tpot <= slo.tpot_s


@dataclass(frozen=True, slots=True)
class Rates:
    scheduled_per_s: float | None
    """(n − 1) / span of intended send times of the sent requests (open loop)."""
    achieved_per_s: float | None
    """(n − 1) / span of actual send times."""
    achieved_share: float | None
    """achieved / scheduled."""


@dataclass(frozen=True, slots=True)
class CacheFigures:
    num_with_reading: int
    response_prompt_tokens: int
    response_cached_tokens: int
    response_hit_rate: float | None
    """Σ cached / Σ prompt tokens over responses that carried a reading."""
    engine_prompt_tokens: int | None
    engine_cached_tokens: int | None
    engine_hit_rate: float | None
    """From the engine's /metrics counters, as the delta over the run."""
    num_hits: int
    num_misses: int


@dataclass(frozen=True, slots=True)
class StructuredFigures:
    num_requests: int
    num_parsed: int
    num_valid: int
    parse_rate: float | None
    valid_rate: float | None


@dataclass(frozen=True, slots=True)
class Goodput:
    slo: Slo
    num_good: int
    share: float | None
    per_s: float | None


@dataclass(frozen=True, slots=True)
class Summary:
    num_requests: int
    num_ok: int
    num_cancelled: int
    num_errors: int
    num_not_sent: int
    errors: dict[str, int]
    duration_s: float | None
    rates: Rates
    request_throughput_per_s: float | None
    output_token_throughput_per_s: float | None
    total_token_throughput_per_s: float | None
    ttft_s: Stat
    first_byte_s: Stat
    tpot_s: Stat
    itl_s: Stat
    e2e_s: Stat
    dispatch_delay_s: Stat
    output_tokens: Stat
    ttft_hit_s: Stat
    ttft_miss_s: Stat
    cache: CacheFigures
    structured: StructuredFigures | None
    goodput: Goodput | None


def rates(records: Sequence[RequestRecord]) -> Rates:
    sent = [r for r in records if r.sent_s is not None]
    if len(sent) < 2:
        return Rates(None, None, None)
    sched = [r.scheduled_s for r in sent]
    actual = [r.sent_s for r in sent if r.sent_s is not None]
    s_span, a_span = max(sched) - min(sched), max(actual) - min(actual)
    scheduled = (len(sent) - 1) / s_span if s_span > 0 else None
    achieved = (len(sent) - 1) / a_span if a_span > 0 else None
    share = achieved / scheduled if scheduled and achieved else None
    return Rates(scheduled, achieved, share)


def cache_figures(records: Sequence[RequestRecord], engine: CacheCounters | None) -> CacheFigures:
    read = [r for r in records if r.cached_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in read)
    cached = sum(r.cached_tokens or 0 for r in read)
    shares = [cache_share(r) for r in read]
    hits = sum(1 for s in shares if s is not None and s >= HIT_SHARE)
    return CacheFigures(
        num_with_reading=len(read),
        response_prompt_tokens=prompt,
        response_cached_tokens=cached,
        response_hit_rate=cached / prompt if prompt else None,
        engine_prompt_tokens=None if engine is None else engine.prompt_tokens,
        engine_cached_tokens=None if engine is None else engine.cached_tokens,
        engine_hit_rate=None if engine is None else engine.hit_rate,
        num_hits=hits,
        num_misses=len(read) - hits,
    )


def structured_figures(records: Sequence[RequestRecord]) -> StructuredFigures | None:
    checked = [r for r in records if r.json_parsed is not None]
    if not checked:
        return None
    parsed = sum(1 for r in checked if r.json_parsed)
    valid = sum(1 for r in checked if r.schema_valid)
    n = len(checked)
    return StructuredFigures(n, parsed, valid, parsed / n, valid / n)


def summarize(
    records: Sequence[RequestRecord],
    *,
    slo: Slo | None = None,
    engine_cache: CacheCounters | None = None,
) -> Summary:
    """Every run-level figure of ``records``."""
    ok = [r for r in records if r.outcome is Outcome.OK]
    errors: dict[str, int] = {}
    for r in records:
        if r.outcome is Outcome.ERROR and r.error_kind is not None:
            errors[r.error_kind.value] = errors.get(r.error_kind.value, 0) + 1
    sent = [r for r in records if r.sent_s is not None]
    ends = [r.end_s for r in sent if r.end_s is not None]
    start = min((r.scheduled_s for r in sent), default=None)
    duration = max(ends) - start if ends and start is not None and max(ends) > start else None
    out_tokens = sum(num_output_tokens(r) for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)

    def per_s(x: float) -> float | None:
        return x / duration if duration else None

    good = None
    if slo is not None:
        n_good = sum(1 for r in records if meets(r, slo))
        good = Goodput(slo, n_good, n_good / len(sent) if sent else None, per_s(n_good))
    split = [(cache_share(r), ttft_s(r)) for r in ok]
    return Summary(
        num_requests=len(records),
        num_ok=len(ok),
        num_cancelled=sum(1 for r in records if r.outcome is Outcome.CANCELLED),
        num_errors=sum(1 for r in records if r.outcome is Outcome.ERROR),
        num_not_sent=sum(1 for r in records if r.outcome is Outcome.NOT_SENT),
        errors=dict(sorted(errors.items())),
        duration_s=duration,
        rates=rates(records),
        request_throughput_per_s=per_s(len(ok)),
        output_token_throughput_per_s=per_s(out_tokens),
        total_token_throughput_per_s=per_s(out_tokens + prompt_tokens),
        ttft_s=stat(v for r in ok if (v := ttft_s(r)) is not None),
        first_byte_s=stat(v for r in ok if (v := first_byte_s(r)) is not None),
        tpot_s=stat(v for r in ok if (v := tpot_s(r)) is not None),
        itl_s=stat(g for r in ok for g in itl_s(r)),
        e2e_s=stat(v for r in ok if (v := e2e_s(r)) is not None),
        dispatch_delay_s=stat(v for r in sent if (v := dispatch_delay_s(r)) is not None),
        output_tokens=stat(float(num_output_tokens(r)) for r in ok),
        ttft_hit_s=stat(t for s, t in split if s is not None and t is not None and s >= HIT_SHARE),
        ttft_miss_s=stat(t for s, t in split if s is not None and t is not None and s < HIT_SHARE),
        cache=cache_figures(records, engine_cache),
        structured=structured_figures(records),
        goodput=good,
    )
