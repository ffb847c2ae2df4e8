"""``predict``: TTFT, TPOT, E2E and queue wait per request for one engine serving a trace.

The library entry point (``kvroute predict`` and ``kvroute advise`` call it)::

    predict(requests, engine="vllm", gpu=resolve_gpu("h100-80gb"),
            model=resolve_model("llama-3.1-8b"), load=Load(concurrency=16)) -> Prediction

The requests (token ids or block hashes; a :class:`~kvroute.predict.workload.FixedWorkload`
makes them) are replayed once with the calibration's point coefficients, which gives
the per-request values, and once per bootstrap draw of the coefficients; each draw's
percentiles are scaled by a log-normal draw of the fit's residual spread. The 10-90 % and
2.5-97.5 % ranges of those give the 80 % and 95 % intervals. Pure: the seed is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvroute.cache.capacity import GpuSpec, ModelShape, capacity_from_hardware
from kvroute.cache.replay.timing import TimingOptions, plan
from kvroute.errors import UsageError
from kvroute.predict.calibration import Calibration, choose_calibration, shipped_priors
from kvroute.predict.engine import ENGINES, EngineFlags, EngineSim, Workload
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.replay import Arrivals, ReplayTimes
from kvroute.predict.result import (
    Estimate,
    Interval,
    MetricSummary,
    PerRequest,
    Prediction,
    Saturation,
    TtftSplit,
)
from kvroute.predict.steptime import StepBasis, Vector
from kvroute.trace.records import Request

DEFAULT_SAMPLES = 20
SATURATION_REQUESTS = 600
"""At most this many requests in the saturation run."""


@dataclass(frozen=True, slots=True)
class Load:
    """How requests arrive: a closed loop of ``concurrency`` clients, Poisson arrivals at
    ``rate_per_s``, or (neither) the trace's own arrival times."""

    concurrency: int | None = None
    rate_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.rate_per_s is not None:
            raise UsageError("give --concurrency or --rate, not both")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.rate_per_s is not None and self.rate_per_s <= 0:
            raise UsageError("--rate must be positive")


def predict(
    requests: Sequence[Request],
    *,
    engine: str,
    gpu: GpuSpec,
    model: ModelShape,
    load: Load,
    num_gpus: int = 1,
    dtype: str = "bf16",
    kv_dtype: str = "auto",
    engine_flags: EngineFlags | None = None,
    calibration: Calibration | None = None,
    capacity_tokens: int | None = None,
    num_samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> Prediction:
    """Predict ``engine`` serving ``requests`` on ``num_gpus`` x ``gpu`` (tensor parallel).

    ``calibration`` must be for ``engine`` (else ``UsageError``); without one the shipped
    fit for this engine and GPU is used, or a widened prior that says so in ``notes``.
    ``capacity_tokens`` overrides the KV pool sized from the GPU memory. Raises
    ``UsageError`` for an unknown engine, missing speed data, or an empty request list.
    """
    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}' (valid: {', '.join(ENGINES)})")
    if not requests:
        raise UsageError("nothing to predict: no requests")
    flags = engine_flags or EngineFlags()
    hw = hardware_for(gpu, num_gpus=num_gpus, dtype=dtype)
    cost = model_cost(model, dtype=dtype, kv_dtype=kv_dtype)
    cal = choose_calibration(engine, gpu.key, calibration, shipped_priors())
    if capacity_tokens is None:
        capacity_tokens = capacity_from_hardware(
            model, gpu, num_gpus=num_gpus, kv_dtype=kv_dtype, weight_bytes=int(cost.weight_bytes)
        ).tokens
    sim = EngineSim(engine, flags, capacity_tokens)
    basis = StepBasis(cost, hw)
    work, load_text = _workload(sim, requests, load, seed)
    point = sim.run(work, basis, cal.coefficients)
    per = _per_request(point)
    rng = np.random.default_rng(seed)
    draws = list(cal.samples[:num_samples]) or [cal.coefficients]
    sample_pcts = np.array([_percentiles(_per_request(sim.run(work, basis, c))) for c in draws])
    # the fit's residual spread and the machine's repeat-to-repeat drift (calibrate
    # --repeats), one draw per coefficient sample: a whole run is faster or slower
    sig_ttft, sig_tpot = cal.interval_sigma()
    noise = np.exp(
        rng.standard_normal((len(draws), 2)) * np.array([max(sig_ttft, 1e-9), max(sig_tpot, 1e-9)])
    )
    point_pcts = _percentiles(per)
    summaries = _summaries(point_pcts, sample_pcts, noise)
    admitted = per.admitted
    prompt = int(per.prompt_tokens[admitted].sum())
    hits = int(per.cached_tokens[admitted].sum())
    notes = list(cal.notes)
    preempted = int((point.preemptions > 0).sum())
    if preempted:
        notes.append(
            f"{preempted} of {len(per.admitted)} requests were preempted when KV blocks ran "
            "out and recomputed (vLLM); their queueing and recompute are in the latencies"
        )
    if cal.source == "prior":
        notes.append("no calibration for this engine and hardware: intervals are wide")
    return Prediction(
        engine=engine,
        model=model.name,
        hardware=gpu.key,
        num_gpus=num_gpus,
        capacity_tokens=capacity_tokens,
        load=load_text,
        calibration_source=cal.source,
        uses_prior=cal.source == "prior",
        notes=tuple(notes),
        requests=per,
        queue=summaries[0],
        ttft=summaries[1],
        tpot=summaries[2],
        e2e=summaries[3],
        hit_ratio=hits / prompt if prompt else 0.0,
        ttft_split=_split(point, per),
        saturation=_saturation(sim, requests, basis, cal.coefficients, work, point, flags, engine),
        num_samples=len(draws),
        num_rejected=int((~admitted).sum()),
    )


def _workload(
    sim: EngineSim, requests: Sequence[Request], load: Load, seed: int
) -> tuple[Workload, str]:
    timing = TimingOptions(arrival_rate_per_s=load.rate_per_s, seed=seed)
    schedule = plan(requests, timing)
    outputs = [max(o, 1) for o in schedule.output_tokens]
    if load.concurrency is not None:
        arrivals = Arrivals(num_clients=load.concurrency)
        text = f"closed loop, {load.concurrency} clients"
    elif schedule.arrival_s is not None:
        arrivals = Arrivals(times_s=schedule.arrival_s)
        text = (
            f"open loop, {load.rate_per_s:g} req/s (Poisson)"
            if load.rate_per_s is not None
            else "the trace's arrival times"
        )
    else:
        arrivals = Arrivals(num_clients=1)
        text = "sequential (the trace has no times): one request at a time"
    return sim.workload(requests, outputs, arrivals), text


def _per_request(t: ReplayTimes) -> PerRequest:
    ttft = t.first_token_s - t.arrival_s
    e2e = t.end_s - t.arrival_s
    steps = t.output_tokens - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(steps > 0, (t.end_s - t.first_token_s) / np.maximum(steps, 1), np.nan)
    return PerRequest(
        queue_s=t.start_s - t.arrival_s,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        prompt_tokens=t.prompt_tokens,
        cached_tokens=t.cached_tokens,
        output_tokens=t.output_tokens,
        admitted=t.admitted,
    )


_METRICS = ("queue_s", "ttft_s", "tpot_s", "e2e_s")
_QS = (50, 90, 99)


def _percentiles(per: PerRequest) -> np.ndarray:
    """``(4 metrics, 3 percentiles)``; NaN where a metric has no values."""
    out = np.full((len(_METRICS), len(_QS)), np.nan)
    for i, name in enumerate(_METRICS):
        v = getattr(per, name)
        v = v[np.isfinite(v)]
        if v.size:
            out[i] = np.percentile(v, _QS)
    return out


def _summaries(point: np.ndarray, samples: np.ndarray, noise: np.ndarray) -> list[MetricSummary]:
    # Residual noise: TTFT's spread for queue and TTFT, TPOT's for TPOT and E2E (an E2E is
    # mostly decode steps).
    which = (0, 0, 1, 1)
    out = []
    for m in range(len(_METRICS)):
        scaled = samples[:, m, :] * noise[:, which[m], None]
        ests = []
        for q in range(len(_QS)):
            col = scaled[:, q]
            col = col[np.isfinite(col)]
            value = float(point[m, q])
            if col.size == 0:
                ests.append(Estimate(value, Interval(value, value), Interval(value, value)))
                continue
            lo80, hi80, lo95, hi95 = np.percentile(col, [10, 90, 2.5, 97.5])
            ests.append(
                Estimate(
                    value,
                    Interval(float(min(lo80, value)), float(max(hi80, value))),
                    Interval(float(min(lo95, value)), float(max(hi95, value))),
                )
            )
        out.append(MetricSummary(*ests))
    return out


def _split(t: ReplayTimes, per: PerRequest) -> TtftSplit:
    ok = per.admitted
    if not ok.any():
        return TtftSplit(0.0, 0.0, 0.0, 0.0)
    queue = float(np.mean(per.queue_s[ok]))
    uncached = float(np.mean(t.uncached_prefill_s[ok]))
    cached = float(np.mean(t.cached_attention_s[ok]))
    ttft = float(np.mean(per.ttft_s[ok]))
    return TtftSplit(queue, uncached, cached, ttft - queue - uncached - cached)


def _max_running(flags: EngineFlags, engine: str) -> int:
    if engine == "vllm":
        return flags.cache.vllm.max_num_seqs
    if engine == "llamacpp":
        return flags.cache.llamacpp.num_slots
    return flags.cache.sglang.max_running_requests or 256


def _saturation(
    sim: EngineSim,
    requests: Sequence[Request],
    basis: StepBasis,
    coef: Vector,
    work: Workload,
    served: ReplayTimes,
    flags: EngineFlags,
    engine: str,
) -> Saturation:
    n = min(len(requests), SATURATION_REQUESTS)
    full = Workload(
        work.pairs[:n],
        work.output_tokens[:n],
        Arrivals(num_clients=_max_running(flags, engine)),
        work.block_size_tokens,
    )
    t = sim.run(full, basis, coef)
    done = np.isfinite(t.end_s)
    makespan = float(np.nanmax(t.end_s)) if done.any() else 0.0
    sustainable = float(done.sum()) / makespan if makespan > 0 else 0.0
    if work.arrivals.times_s is None:
        verdict = (
            f"closed loop: never overloaded; the engine sustains about {sustainable:.3g} req/s "
            "when kept full"
        )
        return Saturation(False, sustainable, None, verdict)
    times = np.sort(work.arrivals.times_s)
    span = float(times[-1] - times[0])
    offered = (len(times) - 1) / span if span > 0 else float("inf")
    waits = served.start_s - served.arrival_s
    order = np.argsort(served.arrival_s)
    q = max(len(order) // 4, 1)
    first, last = np.nanmean(waits[order[:q]]), np.nanmean(waits[order[-q:]])
    growing = bool(
        last > 2 * first + 1e-3 and last > np.nanmean(served.first_token_s - served.start_s)
    )
    saturated = offered > sustainable or growing
    if saturated:
        verdict = (
            f"SATURATED: arrivals at {offered:.3g} req/s exceed what the engine sustains "
            f"(about {sustainable:.3g} req/s); the queue grows for as long as they last"
        )
    else:
        verdict = (
            f"keeps up: {offered:.3g} req/s offered, about {sustainable:.3g} req/s sustainable"
        )
    return Saturation(saturated, sustainable, offered, verdict)
