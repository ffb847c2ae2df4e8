"""``kvroute calibrate``: run the microbenchmark on a live engine, fit the step-time
coefficients (non-negative, through the replay of each probe), bootstrap them, and write
a calibration JSON for ``kvroute predict --calibration``. With ``--repeats N`` the whole
microbenchmark is served N times in a row; each probe is fitted at the median of its
repeats, and the spread between repeats (the machine's drift) is recorded for the
intervals."""

from __future__ import annotations

import platform
from pathlib import Path

import click
import numpy as np
import orjson

from kvroute.cache.capacity import parse_size, resolve_gpu, resolve_model
from kvroute.cache.models.llamacpp import LlamaCppConfig
from kvroute.cache.models.vllm import VllmConfig
from kvroute.cache.registry import EngineSettings
from kvroute.cli.console import make_console
from kvroute.cli.files import emit
from kvroute.cli.predict.live import serve_fixed
from kvroute.errors import EngineError
from kvroute.predict.calibration import Calibration, repeat_spread
from kvroute.predict.engine import ENGINES, EngineFlags
from kvroute.predict.fit import RunPoint, bootstrap, fit, relative_errors, usable
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.probes import microbenchmark

MIN_PROBES = 4


@click.command("calibrate")
@click.option("--engine", "-e", required=True, type=click.Choice(ENGINES))
@click.option("--url", required=True, help="The live engine, e.g. http://127.0.0.1:8080.")
@click.option("--model", "-m", required=True, help="Model preset, config.json or .gguf.")
@click.option("--gpu", "-g", default="cpu-testbed", show_default=True, help="Hardware preset.")
@click.option("--num-gpus", type=int, default=1, show_default=True)
@click.option("--dtype", default="bf16", show_default=True, help="Weight precision.")
@click.option("--capacity-tokens", help="The engine's KV pool in tokens (llama.cpp: -c).")
@click.option(
    "--parallel",
    "-np",
    "num_slots",
    type=int,
    default=4,
    show_default=True,
    help="llama.cpp slots.",
)
@click.option("--max-num-seqs", type=int, default=256, show_default=True, help="vLLM.")
@click.option("--max-isl", type=int, default=1024, show_default=True, help="Longest probe prompt.")
@click.option(
    "--max-batch", type=int, default=4, show_default=True, help="Most concurrent probe clients."
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Serve the whole microbenchmark this many times (its spread widens the intervals).",
)
@click.option("--engine-version", help="Recorded in the calibration.")
@click.option("--engine-flag", "engine_flags", multiple=True, help="Recorded (repeat).")
@click.option("--samples", type=int, default=40, show_default=True, help="Bootstrap refits.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default="-",
    show_default=True,
)
def calibrate_cmd(
    engine: str,
    url: str,
    model: str,
    gpu: str,
    num_gpus: int,
    dtype: str,
    capacity_tokens: str | None,
    num_slots: int,
    max_num_seqs: int,
    max_isl: int,
    max_batch: int,
    repeats: int,
    engine_version: str | None,
    engine_flags: tuple[str, ...],
    samples: int,
    seed: int,
    out_path: Path,
) -> None:
    """Fit ENGINE's step-time coefficients on the live engine at --url."""
    gpu_spec = resolve_gpu(gpu)
    shape = resolve_model(model)
    hw = hardware_for(gpu_spec, num_gpus=num_gpus, dtype=dtype)
    cost = model_cost(shape, dtype=dtype)
    cap = parse_size(capacity_tokens, what="capacity") if capacity_tokens else None
    flags = EngineFlags(
        cache=EngineSettings(
            vllm=VllmConfig(max_num_seqs=max_num_seqs),
            llamacpp=LlamaCppConfig(num_slots=num_slots),
        )
    )
    console = make_console(stderr=True)
    probes = microbenchmark(max_isl=max_isl, max_batch=max_batch)
    # Whole rounds, not each probe N times back to back: a slow spell on a shared
    # machine then shows as a spread between rounds instead of hiding inside one probe.
    ttfts: list[list[float]] = [[] for _ in probes]
    tpots: list[list[float]] = [[] for _ in probes]
    for r in range(repeats):
        for i, probe in enumerate(probes):
            tag = f" (repeat {r + 1}/{repeats})" if repeats > 1 else ""
            with console.status(f"probe {probe.label}{tag}"):
                got = serve_fixed(
                    url,
                    engine,
                    probe.workload,
                    concurrency=probe.concurrency,
                    seed=seed + i + r * len(probes),
                )
            ttft = float(np.nanmedian(got.ttft_s))
            tpot = float(np.nanmedian(got.tpot_s))
            console.print(
                f"{probe.label}{tag}: TTFT p50 {ttft * 1e3:.1f} ms, TPOT p50 {tpot * 1e3:.2f} ms"
            )
            ttfts[i].append(ttft)
            tpots[i].append(tpot)
    points = []
    for i, probe in enumerate(probes):
        w = probe.workload
        points.append(
            RunPoint(
                label=probe.label,
                engine=engine,
                hardware=hw,
                cost=cost,
                capacity_tokens=cap,
                isl=w.isl,
                osl=w.osl,
                concurrency=probe.concurrency,
                ttft_s=float(np.nanmedian(ttfts[i])),
                tpot_s=float(np.nanmedian(tpots[i])),
                prefix_tokens=w.prefix_tokens,
                num_requests=w.num_requests,
            )
        )
    drift_ttft, drift_tpot = repeat_spread(ttfts), repeat_spread(tpots)
    if repeats > 1:
        console.print(
            f"repeat-to-repeat spread (log sd): TTFT {drift_ttft:.3f}, TPOT {drift_tpot:.3f}"
        )
    kept = [p for p in points if usable(p)]
    for p in points:
        if not usable(p):
            console.print(
                f"note: {p.label} left out (no usable TTFT or TPOT: the engine "
                "may have streamed its tokens in one chunk)"
            )
    if len(kept) < MIN_PROBES:
        raise EngineError(f"{url}: only {len(kept)} probes measured; need {MIN_PROBES}")
    points = kept
    with console.status("fitting"):
        result = fit(points, flags)
        draws = bootstrap(result, np.random.default_rng(seed), num_samples=samples)
    err = relative_errors(points, result.predictions)
    console.print(
        f"fit: median error TTFT {np.median(err[:, 0]):.1%}, TPOT {np.median(err[:, 1]):.1%} "
        f"over {len(points)} probes"
    )
    cal = Calibration(
        engine=engine,
        hardware=gpu_spec.key,
        coefficients=result.coefficients,
        samples=tuple(draws),
        sigma_ttft=result.sigma_ttft,
        sigma_tpot=result.sigma_tpot,
        repeat_sigma_ttft=drift_ttft,
        repeat_sigma_tpot=drift_tpot,
        source="calibrate",
        engine_version=engine_version,
        engine_flags=engine_flags,
        machine=f"{platform.node()} ({platform.machine()}, {platform.processor() or 'cpu'})",
        model=shape.name,
        num_points=len(points),
        notes=(f"kvroute calibrate against {url}, {repeats} repeat(s)",),
    )
    emit(out_path, orjson.dumps(cal.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
