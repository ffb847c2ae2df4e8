"""Predicted vs measured latency on the testbed engines (llama-server, vLLM-CPU, SGLang-CPU
serving SmolLM2-135M), cell by cell, resumable.

For each engine: start it (``kvroute engines up`` machinery), calibrate it (``kvroute
calibrate``, cached under ``--cal-dir`` so a rerun reuses it), then for each cell (bench
workload x load x seed) predict FIRST (``kvroute.predict.predict`` on the cell's own
requests, with the engine's settings read from the engine), then serve the cell twice
(``kvroute bench``'s runner: cold cache, greedy, ``ignore_eos``) and record per cell:

- predicted and measured TTFT p50/p90/p99, TPOT p50, E2E p50/p99 (measured: the two
  repeats' mean; spread: ``|a - b| / mean`` of the two repeats, the cell's own noise);
- whether each measured value lies in the predicted 95 % interval;
- the ablation: TTFT p50 predicted with every request's simulated hit replaced by the
  cell's mean hit ratio (same coefficients, same schedule otherwise).

Loads: closed loops of 1, 2 and 4 clients, and one open loop at a constant rate of 85 %
of the rate the engine sustains (predicted, a closed loop at its maximum running
requests), the same arrival times in prediction and measurement.

Every finished cell is written at once to ``--out`` (JSON), and a rerun skips the cells
already there, so the grid can be run in several sittings (``--max-minutes`` per sitting;
the engine lock's holds are at most ~15 min on the shared machine). ``--report`` prints
the table and the summary (error medians, coverage, engine order, ablation) from the JSON
without running anything.

    flock /work/wt/.engines.lock nice -n 10 .venv/bin/python bench/predict_testbed.py \\
        --engine llamacpp --max-minutes 13
    .venv/bin/python bench/predict_testbed.py --report
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from kvroute.bench.results.metrics import e2e_s, stat, tpot_s, ttft_s
from kvroute.bench.results.result import WorkloadInfo
from kvroute.bench.run_options import BenchEndpoint, RunOptions
from kvroute.bench.runner import run_bench
from kvroute.bench.schedule import Arrival, ClosedLoop, OpenLoop
from kvroute.bench.scrape import CacheMode
from kvroute.bench.workloads.base import BenchRequest
from kvroute.bench.workloads.export import trace_requests
from kvroute.bench.workloads.registry import generate
from kvroute.cache.base import Admission, AdmitStatus, PrefixCache
from kvroute.cache.capacity import resolve_gpu, resolve_model
from kvroute.cache.registry import EngineSettings
from kvroute.engines.launch import LaunchOptions
from kvroute.engines.local import LocalEngines
from kvroute.engines.process import Lifetime
from kvroute.engines.registry import make_adapter
from kvroute.engines.state import EngineRecord, StateDir
from kvroute.predict.calibration import load_calibration
from kvroute.predict.engine import EngineFlags, EngineSim
from kvroute.predict.hardware import hardware_for, model_cost
from kvroute.predict.predict import Load, predict
from kvroute.predict.steptime import StepBasis
from kvroute.stats import describe
from kvroute.trace.records import Request
from kvroute.trace.tokenize import tokenize_requests
from kvroute.trace.tokenizer import load_tokenizer
from kvroute.validate.settings import read_setup

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/predict_testbed_results.json"
CAL_DIR = Path("/tmp/kv-predict-cal")
WORKLOADS = ("qa", "rag", "multiturn", "agent", "code")
LOADS = ("c1", "c2", "c4", "rate")
SEEDS = (0, 1)
NUM_REQUESTS = 8
MAX_TOKENS = 16
"""Outputs capped (the workloads ask 64-128): at this shared machine's speed (llama-server
at 0.2-0.3 s per token under load) full-length cells take minutes each."""
MODEL, GPU = "smollm2-135m", "cpu-testbed"
DTYPES = {"llamacpp": "q4_1", "vllm": "bf16", "sglang": "bf16"}
"""The weights each engine serves (the GGUF is Q4_1; the HF conversion bf16)."""
OPTIONS = {
    # One thread: with two on two busy cores, llama.cpp's threads wait on each other.
    "llamacpp": LaunchOptions(parallel=4, ctx_tokens=2048, threads=1),
    "vllm": LaunchOptions(parallel=4, ctx_tokens=2048, vllm_enforce_eager=True),
    "sglang": LaunchOptions(parallel=4, ctx_tokens=2048, sglang_max_total_tokens=16384),
}
METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "e2e_p50", "e2e_p99")
RATE_SHARE = 0.85
CELL_RESERVE_S = 150.0
"""A cell starts only with this much of the sitting left (two repeats, each cut at 150 s)."""


# --- engines ------------------------------------------------------------------------------


@contextmanager
def running(engine: str, state: Path) -> Iterator[EngineRecord]:
    """One replica of ``engine``, stopped (its whole process group) on the way out."""

    async def up() -> list[EngineRecord]:
        async with httpx.AsyncClient() as client:
            return await LocalEngines(StateDir(state), client=client).up(
                engine, replicas=1, options=OPTIONS[engine], lifetime=Lifetime.TIED_TO_PARENT
            )

    async def down() -> None:
        async with httpx.AsyncClient() as client:
            await LocalEngines(StateDir(state), client=client).down()

    try:
        yield asyncio.run(up())[0]
    finally:
        asyncio.run(down())


def engine_flags(engine: str, url: str) -> tuple[EngineFlags, int]:
    """The cache settings and KV pool the engine reports (as ``simulate --validate``)."""

    async def read() -> tuple[EngineSettings, int]:
        async with httpx.AsyncClient() as client:
            setup = await read_setup(make_adapter(engine, url, client=client), EngineSettings())
            return setup.settings, setup.capacity_tokens

    settings, cap = asyncio.run(read())
    if engine == "vllm":
        vllm = dataclasses.replace(settings.vllm, max_num_seqs=OPTIONS["vllm"].parallel)
        settings = dataclasses.replace(settings, vllm=vllm)
    return EngineFlags(cache=settings), cap


def calibration(engine: str, url: str, cap: int, cal_dir: Path) -> Path:
    """``kvroute calibrate`` once per engine; the JSON is reused while it exists."""
    path = cal_dir / f"{engine}.json"
    if path.exists():
        return path
    cal_dir.mkdir(parents=True, exist_ok=True)
    args = [
        str(ROOT / ".venv/bin/kvroute"), "calibrate", "-e", engine, "--url", url,
        "-m", MODEL, "-g", GPU, "--dtype", DTYPES[engine], "--capacity-tokens", str(cap),
        "-np", str(OPTIONS[engine].parallel), "--max-num-seqs", str(OPTIONS[engine].parallel),
        "--max-isl", "256", "--max-batch", "4", "--out", str(path),
    ]  # fmt: skip
    subprocess.run(args, check=True)
    return path


# --- one cell -----------------------------------------------------------------------------


def cell_requests(workload: str, seed: int) -> list[BenchRequest]:
    reqs = generate(workload, NUM_REQUESTS, load_tokenizer(), seed=seed)
    return [dataclasses.replace(r, max_tokens=min(r.max_tokens, MAX_TOKENS)) for r in reqs]


def as_trace(reqs: Sequence[BenchRequest], rate: float | None) -> list[Request]:
    """The requests as predict reads them: tokenized as the engine sees them; at a fixed
    rate, arrivals ``i / rate`` (the bench's constant open loop sends at those times)."""
    trace = trace_requests(reqs)
    if rate is not None:
        trace = [dataclasses.replace(r, arrival_s=i / rate) for i, r in enumerate(trace)]
    return list(tokenize_requests(trace, None, workers=1))


class MeanHit:
    """A cache model that admits as ``inner`` does but reports every request's hit as
    ``ratio`` of its prompt (the ablation: the trace's mean hit instead of the simulated
    one). Delegates everything else."""

    def __init__(self, inner: PrefixCache, ratio: float) -> None:
        self._inner = inner
        self._ratio = ratio

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pin(self, request_id: int, seq: Any, final_tokens: int) -> Admission:
        adm = self._inner.pin(request_id, seq, final_tokens)
        if adm.status is not AdmitStatus.ADMITTED:
            return adm
        return Admission(adm.status, min(int(self._ratio * seq.num_tokens), seq.num_tokens - 1))


class MeanHitSim(EngineSim):
    def __init__(self, engine: str, flags: EngineFlags, cap: int, ratio: float) -> None:
        super().__init__(engine, flags, cap)
        self.ratio = ratio

    def fresh_model(self, block_size_tokens: int | None) -> PrefixCache:
        return MeanHit(super().fresh_model(block_size_tokens), self.ratio)  # type: ignore[return-value]


def predicted(
    engine: str, trace: list[Request], load: Load, flags: EngineFlags, cap: int, cal_path: Path
) -> dict[str, Any]:
    cal = load_calibration(cal_path)
    dtype = DTYPES[engine]
    p = predict(
        trace,
        engine=engine,
        gpu=resolve_gpu(GPU),
        model=resolve_model(MODEL),
        load=load,
        dtype=dtype,
        engine_flags=flags,
        calibration=cal,
        capacity_tokens=cap,
        num_samples=20,
    )
    est = {
        "ttft_p50": p.ttft.p50, "ttft_p90": p.ttft.p90, "ttft_p99": p.ttft.p99,
        "tpot_p50": p.tpot.p50, "e2e_p50": p.e2e.p50, "e2e_p99": p.e2e.p99,
    }  # fmt: skip
    out: dict[str, Any] = {
        m: {"value": e.value, "ci95": [e.ci95.low, e.ci95.high]} for m, e in est.items()
    }
    out["hit_ratio"] = p.hit_ratio
    out["sustainable_rate_per_s"] = p.saturation.sustainable_rate_per_s
    out["saturated"] = p.saturation.saturated
    # The ablation: same replay, every request's hit the cell's mean hit ratio.
    sim = MeanHitSim(engine, flags, cap, p.hit_ratio)
    hw = hardware_for(resolve_gpu(GPU), dtype=dtype)
    basis = StepBasis(model_cost(resolve_model(MODEL), dtype=dtype), hw)
    from kvroute.predict.predict import _workload  # the same arrivals as predict's

    work, _ = _workload(sim, trace, load, 0)
    t = sim.run(work, basis, cal.coefficients)
    ttft = t.first_token_s - t.arrival_s
    out["ablation_ttft_p50"] = describe(ttft).p50
    return out


def measured(url: str, engine: str, reqs: list[BenchRequest], load: Any) -> dict[str, Any]:
    info = WorkloadInfo(
        name="testbed",
        params={},
        seed=0,
        num_requests=len(reqs),
        tokenizer="smollm2",
        prompt_tokens=stat(float(r.prompt_tokens) for r in reqs),
        max_tokens=stat(float(r.max_tokens) for r in reqs),
        num_sessions=0,
        num_structured=0,
        ideal_overlap=None,
    )
    options = RunOptions(
        loads=(load,),
        cache=CacheMode.COLD,
        ignore_eos=True,
        temperature=0.0,
        repeats=2,
        max_duration_s=150.0,
    )
    result = run_bench(reqs, info, [BenchEndpoint(engine, url, engine, None)], options)
    per_repeat = []
    for run in result.runs:
        recs = run.requests
        d = {
            "ttft": describe([v for r in recs if (v := ttft_s(r)) is not None]),
            "tpot": describe([v for r in recs if (v := tpot_s(r)) is not None]),
            "e2e": describe([v for r in recs if (v := e2e_s(r)) is not None]),
        }
        per_repeat.append(
            {
                "ttft_p50": d["ttft"].p50,
                "ttft_p90": d["ttft"].p90,
                "ttft_p99": d["ttft"].p99,
                "tpot_p50": d["tpot"].p50,
                "e2e_p50": d["e2e"].p50,
                "e2e_p99": d["e2e"].p99,
                "failed": sum(1 for r in recs if ttft_s(r) is None),
            }
        )
    out: dict[str, Any] = {"repeats": per_repeat}
    for m in METRICS:
        vals = [r[m] for r in per_repeat if r[m] is not None]
        out[m] = float(np.mean(vals)) if vals else None
        out[f"{m}_spread"] = (
            abs(vals[0] - vals[1]) / float(np.mean(vals)) if len(vals) == 2 else None
        )
    return out


# --- the grid -----------------------------------------------------------------------------


def load_results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"cells": {}}


def save(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def run_engine(engine: str, args: argparse.Namespace, doc: dict[str, Any]) -> None:
    todo = [
        (w, ld, s)
        for s in args.seeds
        for w in args.workloads
        for ld in args.loads
        if f"{engine}/{w}/{ld}/{s}" not in doc["cells"]
    ]
    if not todo:
        print(f"{engine}: every cell already measured", file=sys.stderr)
        return
    deadline = time.monotonic() + args.max_minutes * 60
    with running(engine, Path(f"/tmp/kv-predict-testbed-{engine}")) as rec:
        url = rec.base_url
        flags, cap = engine_flags(engine, url)
        cal = calibration(engine, url, cap, args.cal_dir)
        for w, ld, s in todo:
            if time.monotonic() > deadline - CELL_RESERVE_S:
                print(f"{engine}: out of time; rerun to resume", file=sys.stderr)
                return
            t0 = time.monotonic()
            reqs = cell_requests(w, s)
            if ld == "rate":
                probe = predicted(
                    engine, as_trace(reqs, None), Load(concurrency=4), flags, cap, cal
                )
                rate = RATE_SHARE * probe["sustainable_rate_per_s"]
                load: Load = Load()
                bench_load: Any = OpenLoop(rate, Arrival.CONSTANT)
                trace = as_trace(reqs, rate)
            else:
                c = int(ld[1:])
                rate = None
                load = Load(concurrency=c)
                bench_load = ClosedLoop(c)
                trace = as_trace(reqs, None)
            pred = predicted(engine, trace, load, flags, cap, cal)  # before the run
            meas = measured(url, engine, reqs, bench_load)
            key = f"{engine}/{w}/{ld}/{s}"
            doc["cells"][key] = {
                "engine": engine, "workload": w, "load": ld, "seed": s, "rate_per_s": rate,
                "predicted": pred, "measured": meas, "load_average": _loadavg(),
                "wall_s": time.monotonic() - t0,
            }  # fmt: skip
            doc.setdefault("calibrations", {})[engine] = str(cal)
            save(args.out, doc)
            e = _err(pred["ttft_p50"]["value"], meas["ttft_p50"])
            print(
                f"{key}: TTFT p50 error {e:+.0%} ({time.monotonic() - t0:.0f} s)", file=sys.stderr
            )


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _err(pred: float | None, meas: float | None) -> float:
    if pred is None or meas is None or not meas:
        return float("nan")
    return (pred - meas) / meas


# --- the report ---------------------------------------------------------------------------


def report(doc: dict[str, Any]) -> str:
    cells = doc["cells"]
    lines = [
        "| cell | TTFT p50 pred / meas (spread) | TTFT p90 | TTFT p99 | TPOT p50 | E2E p50 "
        "| E2E p99 | in 95 % | ablation TTFT p50 err |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {m: [] for m in METRICS}
    within: dict[str, list[bool]] = {m: [] for m in METRICS}
    inside_n = inside_all = 0
    abl: dict[str, list[tuple[float, float]]] = {}
    for key in sorted(cells):
        c = cells[key]
        p, m = c["predicted"], c["measured"]
        row = [key]
        n_in = 0
        for met in METRICS:
            pv, mv, sp = p[met]["value"], m[met], m.get(f"{met}_spread")
            e = _err(pv, mv)
            if np.isfinite(e):
                errs[met].append(abs(e))
                within[met].append(sp is not None and abs(e) <= sp)
            lo, hi = p[met]["ci95"]
            ok = mv is not None and lo <= mv <= hi
            n_in += ok
            inside_all += 1
            inside_n += ok
            if met == "ttft_p50":
                cell = f"{pv * 1e3:.0f} / {mv * 1e3:.0f} ms ({e:+.0%}, ±{(sp or 0):.0%})"
            else:
                cell = f"{e:+.0%} (±{(sp or 0):.0%})"
            row.append(cell)
        ae = _err(p["ablation_ttft_p50"], m["ttft_p50"])
        row.append(f"{n_in}/{len(METRICS)}")
        row.append(f"{ae:+.0%}")
        abl.setdefault(c["workload"], []).append(
            (abs(_err(p["ttft_p50"]["value"], m["ttft_p50"])), abs(ae))
        )
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| metric | cells | median abs error | cells within their own spread |")
    lines.append("|---|---|---|---|")
    for met in METRICS:
        if errs[met]:
            lines.append(
                f"| {met} | {len(errs[met])} | {np.median(errs[met]):.1%} | "
                f"{sum(within[met])}/{len(within[met])} |"
            )
    if inside_all:
        lines.append(
            f"\n95 % intervals contain the measured value in {inside_n}/{inside_all} (cell, metric) pairs."
        )
    # Engine order by TTFT p50, per (workload, load, seed) measured on 2+ engines.
    groups: dict[str, dict[str, tuple[float, float]]] = {}
    for c in cells.values():
        g = f"{c['workload']}/{c['load']}/{c['seed']}"
        groups.setdefault(g, {})[c["engine"]] = (
            c["predicted"]["ttft_p50"]["value"],
            c["measured"]["ttft_p50"],
        )
    multi = {g: v for g, v in groups.items() if len(v) >= 2}
    agree = sum(
        1 for v in multi.values()
        if sorted(v, key=lambda e: v[e][0]) == sorted(v, key=lambda e: v[e][1])
    )  # fmt: skip
    lines.append(
        f"Engine order by TTFT p50 agrees in {agree}/{len(multi)} cells run on 2+ engines."
    )
    for w, pairs in sorted(abl.items()):
        base = float(np.median([a for a, _ in pairs]))
        ab = float(np.median([b for _, b in pairs]))
        ratio = ab / base if base else float("nan")
        lines.append(
            f"Ablation {w}: median TTFT p50 error {base:.1%} simulated hits, {ab:.1%} mean hit "
            f"({ratio:.1f}x)."
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", action="append", choices=sorted(OPTIONS), default=[])
    ap.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    ap.add_argument("--loads", type=lambda s: s.split(","), default=list(LOADS))
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=list(SEEDS))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cal-dir", type=Path, default=CAL_DIR)
    ap.add_argument("--max-minutes", type=float, default=13.0, help="Per engine, this sitting.")
    ap.add_argument(
        "--report", action="store_true", help="Print the table from --out; run nothing."
    )
    args = ap.parse_args()
    doc = load_results(args.out)
    if not args.report:
        for engine in args.engine:
            run_engine(engine, args, doc)
    print(report(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
