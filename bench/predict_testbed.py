"""Predicted vs measured latency on the testbed engines (llama-server, vLLM-CPU, SGLang-CPU
serving SmolLM2-135M), cell by cell, resumable.

All the engines asked for are started at once (``kvroute engines up`` machinery, one
compute thread each) and kept up for the whole sitting; each is calibrated (``kvroute
calibrate``, cached under ``--cal-dir`` so a rerun reuses it), then the cells (bench
workload x load x seed) run one at a time, the engines interleaved cell by cell (every
engine serves a (workload, load, seed) before the next one starts), so the shared
machine's drift hits all engines alike. For each cell: predict FIRST (``kvroute.predict
.predict`` on the cell's own requests, with the engine's settings read from the engine),
then serve the cell twice (``kvroute bench``'s runner: cold cache, greedy, ``ignore_eos``)
and record:

- predicted and measured TTFT p50/p90/p99, TPOT p50, E2E p50/p99 (measured: the two
  repeats' mean; spread: ``|a - b| / mean`` of the two repeats, the cell's own noise);
- whether each measured value lies in the predicted 95 % interval;
- the ablation: TTFT p50 predicted with every request's simulated hit replaced by the
  cell's mean hit ratio (same coefficients, same schedule otherwise);
- the 1-minute load average when the cell started and when it ended.

Loads: closed loops of 1, 2 and 4 clients, and one open loop at a constant rate of 85 %
of the rate the engine sustains (predicted, a closed loop at its maximum running
requests), the same arrival times in prediction and measurement. Cells run in tiers, so
a sitting cut short has the most useful ones: seed 0 at c1, c4 and the rate, then seed
1 at c1, then seed 1 at c4 and the rate, then c2 for both seeds.

Every finished cell is written at once to ``--out`` (JSON; the bench result of each
cell, per-request records included, to ``--runs-dir``), and a rerun skips the cells
already there. ``--report`` prints the table and the summary (error medians, coverage,
engine order, ablation) from the JSON without running anything; ``--repredict`` predicts
every stored cell again with the code as it is now and the saved calibrations, stored
beside (never over) the prediction made before the run, and ``--report --after``
tabulates those.

    flock /work/wt/.engines.lock nice -n 10 .venv/bin/python bench/predict_testbed.py \\
        --engine llamacpp --engine vllm --engine sglang --until 07:20
    .venv/bin/python bench/predict_testbed.py --report
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from kvroute.bench.results.metrics import e2e_s, stat, tpot_s, ttft_s
from kvroute.bench.results.result import WorkloadInfo, write_result
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
RUNS_DIR = Path("/tmp/kv-predict-testbed/runs")
WORKLOADS = ("qa", "rag", "multiturn", "agent", "code")
LOADS = ("c1", "c2", "c4", "rate")
SEEDS = (0, 1)
TIERS: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((0,), ("c1", "c4", "rate")),
    ((1,), ("c1",)),
    ((1,), ("c4", "rate")),
    ((0, 1), ("c2",)),
)
"""The order cells run in: (seeds, loads) per tier, every workload and engine in each.
Seed 1's one-user cells come before its others: advise_live.py's ``testbed`` phase
needs both seeds' c1 cells of every workload."""
NUM_REQUESTS = 6
C1_REQUESTS = 8
"""Requests per cell; the one-user cells get more (bench/advise_live.py's ``testbed``
phase scores advise on them: 2 seeds x 8, each served twice)."""
MAX_TOKENS = 16
"""Outputs capped (the workloads ask 64-128): at this shared machine's speed (llama-server
at 0.2-0.3 s per token under load) full-length cells take minutes each."""
PARAMS: dict[str, dict[str, str]] = {
    # Sizes cut down from the workloads' defaults as bench/seed_experiments.py cuts them
    # (the structure, what is shared, unchanged), so that a cold llama-server prefill stays
    # within seconds; every answer at most MAX_TOKENS, so the requests generated here are
    # the ones `kvroute bench generate` writes with the same parameters (advise_live.py
    # reads them as traces).
    "qa": {"question_tokens": "96", "output_tokens": "16"},
    "rag": {"prompt_tokens": "600", "question_tokens": "16", "num_chunks": "3", "output_tokens": "16"},
    "multiturn": {
        "turns": "4", "concurrent_sessions": "4", "system_tokens": "96", "user_tokens": "24",
        "answer_tokens": "16", "think_s": "0.2",
    },
    "agent": {
        "num_tools": "3", "tool_depth": "1", "system_tokens": "64", "steps": "4",
        "tool_result_tokens": "32", "output_tokens": "16", "concurrent_agents": "4",
    },
    "code": {"context_tokens": "256", "output_tokens": "16"},
}  # fmt: skip
MODEL, GPU = "smollm2-135m", "cpu-testbed"
DTYPES = {"llamacpp": "q4_1", "vllm": "bf16", "sglang": "bf16"}
"""The weights each engine serves (the GGUF is Q4_1; the HF conversion bf16)."""
# One compute thread each: with two on two busy cores, an engine's threads wait on each
# other, and the three engines stay up side by side.
OPTIONS = {
    "llamacpp": LaunchOptions(parallel=4, ctx_tokens=2048, threads=1),
    "vllm": LaunchOptions(parallel=4, ctx_tokens=2048, threads=1, vllm_enforce_eager=True),
    "sglang": LaunchOptions(parallel=4, ctx_tokens=2048, threads=1, sglang_max_total_tokens=16384),
}
CALIBRATE_ISL, CALIBRATE_BATCH, CALIBRATE_SAMPLES = 768, 4, 20
"""Probe prompts up to the rag prompts' ~700 tokens, batches up to the c4 cells'."""
METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "e2e_p50", "e2e_p99")
RATE_SHARE = 0.85
CELL_RESERVE_S = 150.0
"""A cell with no earlier cell of its engine and workload to go by starts only with this
much of the sitting left (else with its slowest earlier one's time x 1.2)."""
NOTES_CALIB = Path("/work/wt/notes/calib")
"""Where calibrations are copied as soon as they exist, for sessions working offline."""


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
    """``kvroute calibrate`` once per engine; the JSON is reused while it exists, and a copy
    goes to ``NOTES_CALIB`` when that folder's parent exists."""
    path = cal_dir / f"{engine}.json"
    if not path.exists():
        cal_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        t0 = time.monotonic()
        args = [
            str(ROOT / ".venv/bin/kvroute"), "calibrate", "-e", engine, "--url", url,
            "-m", MODEL, "-g", GPU, "--dtype", DTYPES[engine], "--capacity-tokens", str(cap),
            "-np", str(OPTIONS[engine].parallel), "--max-num-seqs", str(OPTIONS[engine].parallel),
            "--max-isl", str(CALIBRATE_ISL), "--max-batch", str(CALIBRATE_BATCH),
            "--samples", str(CALIBRATE_SAMPLES), "--out", str(partial),
        ]  # fmt: skip
        subprocess.run(args, check=True)
        partial.rename(path)
        print(
            f"{engine}: calibrated in {time.monotonic() - t0:.0f} s, load {_loadavg():.1f}",
            file=sys.stderr,
        )
    if NOTES_CALIB.parent.is_dir():
        NOTES_CALIB.mkdir(exist_ok=True)
        for f in (path, cal_dir / f"{engine}-setup.pickle"):
            if f.is_file():
                shutil.copy(f, NOTES_CALIB / f.name)
    return path


# --- one cell -----------------------------------------------------------------------------


def cell_requests(workload: str, seed: int, num_requests: int) -> list[BenchRequest]:
    reqs = generate(workload, num_requests, load_tokenizer(), seed=seed, params=PARAMS[workload])
    if any(r.max_tokens > MAX_TOKENS for r in reqs):
        raise SystemExit(f"{workload}: PARAMS ask more than {MAX_TOKENS} output tokens")
    return reqs


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


def measured(
    url: str, engine: str, reqs: list[BenchRequest], load: Any, keep: Path
) -> dict[str, Any]:
    """Serve ``reqs`` twice; the bench result (per-request records) is written to ``keep``."""
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
    keep.parent.mkdir(parents=True, exist_ok=True)
    write_result(result, keep)
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
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)


def plan_cells(engines: Sequence[str], args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    """(engine, workload, load, seed) in running order: tier by tier, and within a
    (workload, load, seed) every engine one after another."""
    cells = []
    for seeds, loads in TIERS:
        for s in seeds:
            for w in args.workloads:
                for ld in loads:
                    if s not in args.seeds or ld not in args.loads:
                        continue
                    cells += [(e, w, ld, s) for e in engines]
    return cells


def run_grid(engines: Sequence[str], args: argparse.Namespace, doc: dict[str, Any]) -> None:
    todo = [c for c in plan_cells(engines, args) if "/".join(map(str, c)) not in doc["cells"]]
    if not todo:
        print("every cell already measured", file=sys.stderr)
        return
    deadline = time.monotonic() + args.max_minutes * 60
    if args.until:
        hh, mm = (int(x) for x in args.until.split(":"))
        now = time.gmtime()
        left = (hh * 60 + mm) * 60 - (now.tm_hour * 3600 + now.tm_min * 60 + now.tm_sec)
        deadline = min(deadline, time.monotonic() + left)
    doc.setdefault("setup", {}).update(
        num_requests=args.num_requests, c1_requests=args.c1_requests, max_tokens=MAX_TOKENS,
        params=PARAMS,
        options={e: dataclasses.asdict(OPTIONS[e]) for e in engines},
        calibrate={"max_isl": CALIBRATE_ISL, "max_batch": CALIBRATE_BATCH},
    )  # fmt: skip
    with ExitStack() as stack:
        recs = {
            e: stack.enter_context(running(e, Path(f"/tmp/kv-predict-testbed/state-{e}")))
            for e in engines
        }
        urls = {e: r.base_url for e, r in recs.items()}
        print(f"up: {urls}, load {_loadavg():.1f}", file=sys.stderr)
        setup = {e: engine_flags(e, u) for e, u in urls.items()}
        args.cal_dir.mkdir(parents=True, exist_ok=True)
        for e, fc in setup.items():
            # The settings as read from the engine, for --repredict without it.
            (args.cal_dir / f"{e}-setup.pickle").write_bytes(pickle.dumps(fc))
        cals = {e: calibration(e, urls[e], setup[e][1], args.cal_dir) for e in engines}
        doc.setdefault("calibrations", {}).update({e: str(c) for e, c in cals.items()})
        for e, w, ld, s in todo:
            key = f"{e}/{w}/{ld}/{s}"
            before = [
                c["wall_s"] for c in doc["cells"].values()
                if c["engine"] == e and c["workload"] == w
            ]  # fmt: skip
            need = 1.2 * max(before) if before else CELL_RESERVE_S
            if time.monotonic() > deadline - need:
                print(f"{key}: {need:.0f} s needed, out of time; rerun to resume", file=sys.stderr)
                continue
            flags, cap = setup[e]
            doc["cells"][key] = run_cell(e, w, ld, s, urls[e], flags, cap, cals[e], args)
            save(args.out, doc)
            c = doc["cells"][key]
            err = _err(c["predicted"]["ttft_p50"]["value"], c["measured"]["ttft_p50"])
            print(
                f"{key}: TTFT p50 error {err:+.0%} ({c['wall_s']:.0f} s, load "
                f"{c['load_average_start']:.1f}-{c['load_average']:.1f})",
                file=sys.stderr,
            )


def run_cell(
    engine: str, w: str, ld: str, s: int, url: str, flags: EngineFlags, cap: int, cal: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    t0 = time.monotonic()
    load0 = _loadavg()
    reqs = cell_requests(w, s, args.c1_requests if ld == "c1" else args.num_requests)
    load, bench_load, rate = cell_load(engine, ld, reqs, flags, cap, cal)
    trace = as_trace(reqs, rate)
    pred = predicted(engine, trace, load, flags, cap, cal)  # before the run
    keep = args.runs_dir / f"{engine}-{w}-{ld}-{s}.json"
    meas = measured(url, engine, reqs, bench_load, keep)
    return {
        "engine": engine, "workload": w, "load": ld, "seed": s, "rate_per_s": rate,
        "num_requests": len(reqs), "predicted": pred, "measured": meas,
        "predicted_at": time.strftime("%H:%M:%S", time.gmtime()),
        "load_average_start": load0, "load_average": _loadavg(),
        "wall_s": time.monotonic() - t0, "run_file": str(keep),
    }  # fmt: skip


def cell_load(
    engine: str, ld: str, reqs: list[BenchRequest], flags: EngineFlags, cap: int, cal: Path
) -> tuple[Load, Any, float | None]:
    """Predict's load, the bench's, and the open loop's rate (None for a closed loop)."""
    if ld == "rate":
        probe = predicted(engine, as_trace(reqs, None), Load(concurrency=4), flags, cap, cal)
        rate = RATE_SHARE * probe["sustainable_rate_per_s"]
        return Load(), OpenLoop(rate, Arrival.CONSTANT), rate
    c = int(ld[1:])
    return Load(concurrency=c), ClosedLoop(c), None


def repredict(doc: dict[str, Any], args: argparse.Namespace) -> None:
    """Predict every stored cell again (code as it is now, the saved calibrations) into
    ``predicted_after``; the pre-run ``predicted`` is left as it was."""
    for key, c in sorted(doc["cells"].items()):
        e = c["engine"]
        cal = args.cal_dir / f"{e}.json"
        setup_file = args.cal_dir / f"{e}-setup.pickle"
        if not setup_file.is_file():
            raise SystemExit(f"{key}: no {setup_file} (engine settings); cannot re-predict")
        flags, cap = pickle.loads(setup_file.read_bytes())
        reqs = cell_requests(c["workload"], c["seed"], c["num_requests"])
        if c["load"] == "rate":
            load: Load = Load()
        else:
            load = Load(concurrency=int(c["load"][1:]))
        pred = predicted(e, as_trace(reqs, c["rate_per_s"]), load, flags, cap, cal)
        pred["made"] = "after the run: " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        c["predicted_after"] = pred
    save(args.out, doc)


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _err(pred: float | None, meas: float | None) -> float:
    if pred is None or meas is None or not meas:
        return float("nan")
    return (pred - meas) / meas


# --- the report ---------------------------------------------------------------------------


def report(doc: dict[str, Any], which: str = "predicted") -> str:
    cells = {k: c for k, c in doc["cells"].items() if which in c}
    lines = [
        "| cell | TTFT p50 pred / meas (spread) | TTFT p90 | TTFT p99 | TPOT p50 | E2E p50 "
        "| E2E p99 | in 95 % | ablation TTFT p50 err | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {m: [] for m in METRICS}
    within: dict[str, list[bool]] = {m: [] for m in METRICS}
    inside_n = inside_all = 0
    abl: dict[str, list[tuple[float, float]]] = {}
    for key in sorted(cells):
        c = cells[key]
        p, m = c[which], c["measured"]
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
        row.append(f"{c.get('load_average_start', c['load_average']):.1f}–{c['load_average']:.1f}")
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
    engines = sorted({c["engine"] for c in cells.values()})
    lines.append("")
    lines.append("| engine | cells | " + " | ".join(METRICS) + " | in 95 % |")
    lines.append("|---|---|" + "---|" * (len(METRICS) + 1))
    for eng in engines:
        mine = [c for c in cells.values() if c["engine"] == eng]
        meds = []
        for met in METRICS:
            es = [abs(_err(c[which][met]["value"], c["measured"][met])) for c in mine]
            es = [e for e in es if np.isfinite(e)]
            meds.append(f"{np.median(es):.0%}" if es else "–")
        ins = sum(
            1 for c in mine for met in METRICS
            if c["measured"][met] is not None
            and c[which][met]["ci95"][0] <= c["measured"][met] <= c[which][met]["ci95"][1]
        )  # fmt: skip
        lines.append(
            f"| {eng} | {len(mine)} | "
            + " | ".join(meds)
            + f" | {ins}/{len(mine) * len(METRICS)} |"
        )
    # The machine's drift: the signed TTFT p50 error by the load average the cell ran at.
    bands: dict[str, list[float]] = {}
    for c in cells.values():
        ld = (c.get("load_average_start", c["load_average"]) + c["load_average"]) / 2
        band = "< 4" if ld < 4 else "4-7" if ld < 7 else ">= 7"
        e = _err(c[which]["ttft_p50"]["value"], c["measured"]["ttft_p50"])
        if np.isfinite(e):
            bands.setdefault(band, []).append(e)
    lines.append("")
    for band in ("< 4", "4-7", ">= 7"):
        if band in bands:
            lines.append(
                f"Load average {band}: {len(bands[band])} cells, TTFT p50 error median "
                f"{np.median(bands[band]):+.0%} signed, {np.median(np.abs(bands[band])):.0%} abs."
            )
    ttft_in = sum(
        1 for c in cells.values()
        if c["measured"]["ttft_p50"] is not None
        and c[which]["ttft_p50"]["ci95"][0] <= c["measured"]["ttft_p50"] <= c[which]["ttft_p50"]["ci95"][1]
    )  # fmt: skip
    lines.append(f"TTFT p50 inside its 95 % interval in {ttft_in}/{len(cells)} cells.")
    if inside_all:
        lines.append(
            f"\n95 % intervals contain the measured value in {inside_n}/{inside_all} (cell, metric) pairs."
        )
    # Engine order by TTFT p50, per (workload, load, seed) measured on 2+ engines.
    groups: dict[str, dict[str, tuple[float, float]]] = {}
    for c in cells.values():
        g = f"{c['workload']}/{c['load']}/{c['seed']}"
        groups.setdefault(g, {})[c["engine"]] = (
            c[which]["ttft_p50"]["value"],
            c["measured"]["ttft_p50"],
        )
    multi = {g: v for g, v in groups.items() if len(v) >= 2}
    agree = sum(
        1 for v in multi.values()
        if sorted(v, key=lambda e: v[e][0]) == sorted(v, key=lambda e: v[e][1])
    )  # fmt: skip
    eng_pairs = [
        (v[a], v[b]) for v in multi.values() for i, a in enumerate(sorted(v))
        for b in sorted(v)[i + 1 :]
    ]  # fmt: skip
    pair_ok = sum(1 for (pa, ma), (pb, mb) in eng_pairs if (pa < pb) == (ma < mb))
    lines.append(
        f"Engine order by TTFT p50 agrees in {agree}/{len(multi)} cells run on 2+ engines "
        f"(whole order); {pair_ok}/{len(eng_pairs)} engine pairs."
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
    ap.add_argument("-n", "--num-requests", type=int, default=NUM_REQUESTS)
    ap.add_argument("--c1-requests", type=int, default=C1_REQUESTS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cal-dir", type=Path, default=CAL_DIR)
    ap.add_argument("--runs-dir", type=Path, default=RUNS_DIR)
    ap.add_argument("--max-minutes", type=float, default=60.0, help="This sitting, all engines.")
    ap.add_argument("--until", help="HH:MM UTC: start no cell that would end after it.")
    ap.add_argument(
        "--report", action="store_true", help="Print the table from --out; run nothing."
    )
    ap.add_argument("--repredict", action="store_true", help="Predict stored cells again.")
    ap.add_argument("--after", action="store_true", help="Report the re-predictions.")
    args = ap.parse_args()
    doc = load_results(args.out)
    if args.repredict:
        repredict(doc, args)
    elif not args.report and args.engine:
        run_grid(args.engine, args, doc)
    print(report(doc, "predicted_after" if args.after else "predicted"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
