"""Two results side by side: each figure's difference, and whether it exceeds the noise.

Runs are paired by (endpoint name, load label); when each result has a single
endpoint (two engines benchmarked separately) they are paired by load label alone.
The noise a difference is judged against:

- with two or more repeats on both sides, the run-to-run spread: the difference is
  within noise when it is no larger than the wider of the two ranges (max − min over
  repeats) of that figure;
- otherwise a bootstrap: requests of each run are resampled with replacement
  (``num_boot`` times, seeded) and the 95 % interval of the difference of the
  statistic is reported; within noise when it contains 0. Throughputs and hit rates
  are run-level figures with no per-request sample: their noise is not estimated
  from one run (repeat the runs to get it).

Pure: results in, dataclasses out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.bench.results import metrics
from kvroute.bench.results.metrics import Summary
from kvroute.bench.results.record import Outcome, RequestRecord
from kvroute.bench.results.result import BenchResult, Run

PerRequest = Callable[[RequestRecord], float | None]


@dataclass(frozen=True, slots=True)
class _Figure:
    name: str
    unit: str
    """"s", "/s" or "share"."""
    lower_is_better: bool
    of_summary: Callable[[Summary], float | None]
    per_request: PerRequest | None = None
    quantile: float | None = None


FIGURES: tuple[_Figure, ...] = (
    _Figure("TTFT p50", "s", True, lambda s: s.ttft_s.p50, metrics.ttft_s, 50),
    _Figure("TTFT p90", "s", True, lambda s: s.ttft_s.p90, metrics.ttft_s, 90),
    _Figure("TTFT p99", "s", True, lambda s: s.ttft_s.p99, metrics.ttft_s, 99),
    _Figure("TPOT p50", "s", True, lambda s: s.tpot_s.p50, metrics.tpot_s, 50),
    _Figure("TPOT p99", "s", True, lambda s: s.tpot_s.p99, metrics.tpot_s, 99),
    _Figure("ITL mean", "s", True, lambda s: s.itl_s.mean, None),
    _Figure("E2E p50", "s", True, lambda s: s.e2e_s.p50, metrics.e2e_s, 50),
    _Figure("E2E p99", "s", True, lambda s: s.e2e_s.p99, metrics.e2e_s, 99),
    _Figure("request throughput", "/s", False, lambda s: s.request_throughput_per_s),
    _Figure("output token throughput", "/s", False, lambda s: s.output_token_throughput_per_s),
    _Figure("goodput", "/s", False, lambda s: None if s.goodput is None else s.goodput.per_s),
    _Figure("engine cache hit", "share", False, lambda s: s.cache.engine_hit_rate),
    _Figure("response cache hit", "share", False, lambda s: s.cache.response_hit_rate),
    _Figure(
        "error share",
        "share",
        True,
        lambda s: s.num_errors / s.num_requests if s.num_requests else None,
    ),
)


@dataclass(frozen=True, slots=True)
class Diff:
    name: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None
    """b − a."""
    relative: float | None
    """(b − a) / a."""
    noise_low: float | None
    noise_high: float | None
    """The interval a difference must leave to count (bootstrap CI of b − a, or ± the
    repeat spread)."""
    within_noise: bool | None
    better: str | None
    """"a", "b" or None (within noise, or unknown)."""


@dataclass(frozen=True, slots=True)
class Pair:
    endpoint_a: str
    endpoint_b: str
    load: str
    num_repeats_a: int
    num_repeats_b: int
    noise: str
    """"bootstrap" or "repeats"."""
    diffs: list[Diff]


def _values(records: Sequence[RequestRecord], fn: PerRequest) -> np.ndarray:
    vals = [fn(r) for r in records if r.outcome is Outcome.OK]
    return np.array([v for v in vals if v is not None], dtype=np.float64)


def _bootstrap(
    a: np.ndarray, b: np.ndarray, q: float, rng: np.random.Generator, num: int
) -> tuple[float, float]:
    ia = rng.integers(0, a.size, size=(num, a.size))
    ib = rng.integers(0, b.size, size=(num, b.size))
    diffs = np.percentile(b[ib], q, axis=1) - np.percentile(a[ia], q, axis=1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _spread(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) - min(known) if len(known) >= 2 else None


def _diff(
    fig: _Figure,
    runs_a: Sequence[Run],
    runs_b: Sequence[Run],
    rng: np.random.Generator,
    num_boot: int,
) -> Diff:
    va = [fig.of_summary(r.summary) for r in runs_a]
    vb = [fig.of_summary(r.summary) for r in runs_b]
    a, b = _mean(va), _mean(vb)
    delta = None if a is None or b is None else b - a
    rel = None if delta is None or not a else delta / a
    lo = hi = None
    if len(runs_a) >= 2 and len(runs_b) >= 2:
        spreads = [s for s in (_spread(va), _spread(vb)) if s is not None]
        if spreads:
            lo, hi = -max(spreads), max(spreads)
    elif fig.per_request is not None and fig.quantile is not None:
        xa = _values(runs_a[0].requests, fig.per_request)
        xb = _values(runs_b[0].requests, fig.per_request)
        if xa.size >= 2 and xb.size >= 2:
            lo, hi = _bootstrap(xa, xb, fig.quantile, rng, num_boot)
    within = None
    if delta is not None and lo is not None and hi is not None:
        within = (lo <= 0 <= hi) if len(runs_a) < 2 or len(runs_b) < 2 else abs(delta) <= hi
    better = None
    if delta is not None and within is False and delta != 0:
        better = "b" if (delta < 0) == fig.lower_is_better else "a"
    return Diff(fig.name, fig.unit, a, b, delta, rel, lo, hi, within, better)


def _groups(result: BenchResult) -> dict[tuple[str, str], list[Run]]:
    out: dict[tuple[str, str], list[Run]] = {}
    for run in result.runs:
        out.setdefault((run.endpoint.name, run.load.label), []).append(run)
    return out


def mismatches(a: BenchResult, b: BenchResult) -> list[str]:
    """What makes ``a`` and ``b`` different experiments rather than two engines on one:
    a different workload, parameters, seed, request count, tokenizer or schedule (load
    steps). Empty when the same requests went out on the same schedule."""
    wa, wb = a.workload, b.workload
    out = [
        f"{what} {va!r} vs {vb!r}"
        for what, va, vb in (
            ("workload", wa.name, wb.name),
            ("parameters", wa.params, wb.params),
            ("seed", wa.seed, wb.seed),
            ("requests", wa.num_requests, wb.num_requests),
            ("tokenizer", wa.tokenizer, wb.tokenizer),
        )
        if va != vb
    ]
    loads_a = sorted({r.load.label for r in a.runs})
    loads_b = sorted({r.load.label for r in b.runs})
    if loads_a != loads_b:
        out.append(f"schedule {', '.join(loads_a) or 'none'} vs {', '.join(loads_b) or 'none'}")
    return out


def compare(a: BenchResult, b: BenchResult, *, seed: int = 0, num_boot: int = 1000) -> list[Pair]:
    """Every pairable run of ``a`` against ``b`` (see the module docstring)."""
    ga, gb = _groups(a), _groups(b)
    single = len({k[0] for k in ga}) == 1 and len({k[0] for k in gb}) == 1
    pairs = []
    rng = np.random.default_rng(seed)
    for key, runs_a in ga.items():
        match = gb.get(key)
        if match is None and single:
            match = next((v for k, v in gb.items() if k[1] == key[1]), None)
        if match is None:
            continue
        noise = "repeats" if len(runs_a) >= 2 and len(match) >= 2 else "bootstrap"
        pairs.append(
            Pair(
                key[0],
                match[0].endpoint.name,
                key[1],
                len(runs_a),
                len(match),
                noise,
                [_diff(f, runs_a, match, rng, num_boot) for f in FIGURES],
            )
        )
    return pairs
