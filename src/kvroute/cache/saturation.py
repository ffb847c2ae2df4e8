"""Whether a replayed engine kept up with the arrivals, and the rate it did sustain.

A replay whose queue grows for the whole trace reports waits of hours: those are not
latencies a user would see but the sign of an engine offered more than it can serve,
and its hit ratio is that of a queue, not of live traffic. Such a run is a verdict of
its own (*saturated*), with the rate it could sustain.

An engine is called saturated when both hold:

- it finished the work more slowly than it arrived: completions per second over its
  busy span (first start to last end) are below ``0.9 x`` the arrival rate (requests per
  second over the arrival span); a stable engine finishes within one run time of the
  last arrival, a saturated one long after;
- requests waited far longer than they ran: the wait p90 exceeds ``10 x`` the median run
  time and one second (a short burst queues for a few run times, then drains).

The sustained rate is the completions per second over the busy span: a saturated engine
is busy throughout, so this is its throughput on this traffic mix. Pure: arrays in,
a dataclass out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MIN_REQUESTS = 10
"""Fewer admitted requests than this are not judged (too few to tell a queue from a burst)."""
RATE_SHORTFALL = 0.9
WAIT_OVER_RUN = 10.0
MIN_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class Saturation:
    """How the engine's throughput compared with the arrivals."""

    saturated: bool
    offered_rate_per_s: float
    """Requests per second over the arrival span (first to last arrival)."""
    sustained_rate_per_s: float
    """Completed requests per second over the engine's busy span (first start to last end)."""
    median_run_s: float


def judge_saturation(
    arrival_s: npt.NDArray[np.float64],
    wait_s: npt.NDArray[np.float64],
    end_s: npt.NDArray[np.float64],
) -> Saturation | None:
    """Judge one timed replay (per-request arrays in one order; rejected requests have
    NaN waits and ends). None when there are too few requests or no arrival span to judge."""
    served = np.isfinite(wait_s) & np.isfinite(end_s)
    num_served = int(served.sum())
    span_s = float(arrival_s.max() - arrival_s.min()) if arrival_s.size else 0.0
    if num_served < MIN_REQUESTS or span_s <= 0:
        return None
    start_s = arrival_s[served] + wait_s[served]
    busy_s = float(end_s[served].max() - start_s.min())
    offered = (arrival_s.size - 1) / span_s
    sustained = num_served / busy_s if busy_s > 0 else float("inf")
    median_run_s = float(np.median(end_s[served] - start_s))
    wait_p90 = float(np.percentile(wait_s[served], 90))
    saturated = (
        sustained < RATE_SHORTFALL * offered
        and wait_p90 > WAIT_OVER_RUN * median_run_s
        and wait_p90 > MIN_WAIT_S
    )
    return Saturation(
        saturated=saturated,
        offered_rate_per_s=offered,
        sustained_rate_per_s=sustained,
        median_run_s=median_run_s,
    )
