"""The fit recovers known coefficients from runs generated with them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvroute.cache.capacity import load_presets
from kvroute.predict.fit import GPU_UPPER, RunPoint, bootstrap, fit, predict_points, relative_errors
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.nnls import nnls

TRUE = (3e-3, 0.0, 2.0, 0.0, 1.2, 0.0, 0.0, 0.0, 0.005, 5e-4)


def _points(statistic: str = "median") -> list[RunPoint]:
    p = load_presets()
    cost = model_cost(p.models["llama-3.1-8b"])
    hw = hardware_for(p.gpus["h100-80gb"])
    shapes = [
        (1024, 64, 1),
        (1024, 64, 8),
        (4096, 32, 4),
        (4096, 64, 16),
        (2048, 128, 32),
        (512, 64, 2),
        (8192, 32, 8),
        (1024, 256, 64),
    ]
    base = [
        RunPoint(
            "synthetic",
            "vllm",
            hw,
            cost,
            400_000,
            isl,
            osl,
            c,
            1.0,
            1.0,
            num_requests=5 * c if statistic == "mean" else None,
            statistic=statistic,
        )
        for isl, osl, c in shapes
    ]
    preds = predict_points(base, TRUE)
    return [
        dataclasses.replace(b, ttft_s=q.ttft_s, tpot_s=q.tpot_s)
        for b, q in zip(base, preds, strict=True)
    ]


@pytest.mark.parametrize("statistic", ["median", "mean"])
def test_fit_recovers_the_coefficients_that_made_the_runs(statistic: str) -> None:
    points = _points(statistic)
    result = fit(points)
    errors = relative_errors(points, result.predictions)
    # Rows average the requests around the median, so a point can miss by a little.
    assert errors.max() < 0.05
    assert float(np.median(errors)) < 0.01
    got = np.array(result.coefficients)
    want = np.array(TRUE)
    # The dominant terms come back close; the per-step constant trades a little with the
    # smaller per-sequence terms (nearly collinear on eight runs). Every coefficient >= 0.
    for name, i, tol in (("step", 0, 0.25), ("prefill", 2, 0.1), ("memory", 4, 0.1)):
        assert abs(got[i] - want[i]) / want[i] < tol, name
    assert (got >= 0).all()
    draws = bootstrap(result, np.random.default_rng(0), num_samples=5)
    assert len(draws) == 5 and all(min(d) >= 0 for d in draws)


def test_nnls_matches_the_unconstrained_solution_when_it_is_positive() -> None:
    rng = np.random.default_rng(1)
    a = rng.random((30, 4))
    x = np.array([1.0, 2.0, 0.5, 3.0])
    np.testing.assert_allclose(nnls(a, a @ x), x, rtol=1e-8)
    y = nnls(a, a @ np.array([1.0, -2.0, 0.5, 3.0]))
    assert (y >= 0).all()


def test_fit_on_probes_with_few_equal_requests_stays_finite() -> None:
    # Two clients x two requests: four nearly equal TTFTs, an even count whose median is
    # no request's value. The rows must still pick a request (this once gave NaN).
    p = load_presets()
    cost = model_cost(p.models["smollm2-135m"])
    hw = hardware_for(p.gpus["cpu-testbed"])
    points = [
        RunPoint("probe", "vllm", hw, cost, 40_000, isl, 16, c, ttft, tpot, num_requests=2 * c)
        for isl, c, ttft, tpot in ((64, 1, 0.2, 0.05), (128, 2, 0.5, 0.06), (256, 1, 0.6, 0.05))
    ]
    result = fit(points)
    assert all(np.isfinite(result.coefficients))
    assert all(np.isfinite([q.ttft_s for q in result.predictions]))


def test_the_per_request_constant_stays_under_its_bound() -> None:
    # Runs made with 50 ms of per-request overhead: the fit may not put more than the
    # bound there (it must explain the rest with steps, or miss).
    truth = (*TRUE[:8], 0.05, TRUE[9])
    base = _points()
    preds = predict_points(base, truth)
    points = [
        dataclasses.replace(b, ttft_s=q.ttft_s, tpot_s=q.tpot_s)
        for b, q in zip(base, preds, strict=True)
    ]
    got = fit(points, upper=GPU_UPPER).coefficients
    assert got[8] == pytest.approx(GPU_UPPER["request"])
    assert fit(points).coefficients[8] > 2 * GPU_UPPER["request"]  # unbounded: found
