"""The seed experiments on the CPU testbed: llama-server vs vLLM-CPU vs SGLang-CPU, same
SmolLM2-135M.

Run:  .venv/bin/python bench/seed_experiments.py [--workloads rag,multiturn,...]
          [--engines llamacpp,vllm,sglang] [--loads 1,4] [-n 16]
          [--llamacpp-url URL] [--vllm-url URL] [--sglang-url URL] [--merge]
      .venv/bin/python bench/seed_experiments.py --charts-only | --tables

Starts llama-server (the GGUF, 4 slots), vLLM-CPU (the HF conversion, 4 sequences,
32-token blocks, eager) and SGLang-CPU (the HF conversion, 4 running requests, a
16,384-token radix pool, page size 1, plain-torch layers) with kvroute's own launcher,
one compute thread each, unless a URL is given. ``--merge`` keeps the workloads of an
existing summary.json that this call does not run, so a long experiment can be run a
few workloads at a time. For each workload (rag, multiturn, agent, json, code: sizes cut down so the
whole experiment fits a shared 2-core machine) it runs `kvroute bench` once with both
endpoints side by side: the same pre-generated requests and closed-loop schedule go to
each engine one after the other, each from a cold cache (reset through its adapter), at
every load (closed loop of 1 and of 4 users by default).

Writes bench/seed_results/<workload>.json (kvroute.bench/1 results, every request),
bench/seed_results/summary.json (the figures the write-up quotes, the machine and the
load average around each workload) and the charts docs/img/seed-*.svg, drawn with
kvroute's own report/charts/svg.py. `--charts-only` redraws the charts from summary.json,
`--tables` prints the write-up's markdown tables from it.
The write-up is docs/seed-experiments.md. These are CPU testbed measurements, not claims
about GPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvroute.engines.launch import LaunchOptions  # noqa: E402
from kvroute.engines.local import LocalEngines  # noqa: E402
from kvroute.engines.paths import llama_server_path  # noqa: E402
from kvroute.engines.process import Lifetime  # noqa: E402
from kvroute.engines.sglang_paths import sglang_python_path  # noqa: E402
from kvroute.engines.state import StateDir  # noqa: E402
from kvroute.engines.vllm_paths import vllm_python_path  # noqa: E402
from kvroute.report.charts.svg import Bars, bar_chart  # noqa: E402

ENGINES = ("llamacpp", "vllm", "sglang")
WORKLOADS: dict[str, dict[str, str]] = {
    # Sizes are cut down from the workloads' defaults so that a cold prefill stays within
    # seconds on a shared 2-core machine; the structure (what is shared) is unchanged.
    # ~700-token prompts, 60 % of them the shared template (the workload's default).
    # (256 is refused at 8-12 requests: the shared template alone is longer than a mean
    # that small allows, so the workload could not mean what it says.)
    "rag": {
        "prompt_tokens": "600",
        "question_tokens": "16",
        "num_chunks": "3",
        "output_tokens": "16",
    },
    # 4 sessions open at once, ~4 turns each, every turn re-sending the history.
    "multiturn": {
        "turns": "4",
        "concurrent_sessions": "4",
        "system_tokens": "96",
        "user_tokens": "24",
        "answer_tokens": "24",
        "think_s": "0.2",
    },
    # 3 tools in the system prompt, growing tool-call history, sub-agent forks.
    "agent": {
        "num_tools": "3",
        "tool_depth": "1",
        "system_tokens": "64",
        "steps": "4",
        "tool_result_tokens": "32",
        "output_tokens": "16",
        "concurrent_agents": "4",
    },
    # Schemas of depth 1..2, 2 properties per object: small enough for the answer to
    # close within max_tokens (a cut-off answer counts as not parsed).
    "json": {
        "prompt_tokens": "192",
        "max_depth": "2",
        "width": "2",
        "output_tokens": "80",
    },
    "code": {"context_tokens": "256", "output_tokens": "16"},
}
LAUNCH = LaunchOptions(
    parallel=4, ctx_tokens=4096, threads=1, vllm_enforce_eager=True, sglang_max_total_tokens=16384
)
OUT_DIR = ROOT / "bench" / "seed_results"
IMG_DIR = ROOT / "docs" / "img"
ENGINE_LABEL = {"llamacpp": "llama-server", "vllm": "vLLM-CPU", "sglang": "SGLang-CPU"}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--engines", default=",".join(ENGINES), help="which engines, comma-separated")
    ap.add_argument("--loads", default="1,4", help="closed-loop users per run, comma-separated")
    ap.add_argument("-n", "--num-requests", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llamacpp-url", help="use this llama-server instead of starting one")
    ap.add_argument("--vllm-url", help="use this vLLM server instead of starting one")
    ap.add_argument("--sglang-url", help="use this SGLang server instead of starting one")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the other workloads of an existing summary.json (run a few at a time)",
    )
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--img-dir", type=Path, default=IMG_DIR)
    ap.add_argument("--charts-only", action="store_true", help="redraw charts from summary.json")
    ap.add_argument(
        "--tables", action="store_true", help="print the write-up's tables from summary.json"
    )
    args = ap.parse_args()
    summary_path = args.out_dir / "summary.json"
    if args.tables or args.charts_only:
        if not summary_path.is_file():
            sys.exit(f"error: {summary_path} not found; run the experiment first (no flags)")
        if args.tables:
            print(tables(json.loads(summary_path.read_text())))
            return
    else:
        names = [w for w in args.workloads.split(",") if w]
        unknown = sorted(set(names) - set(WORKLOADS))
        if unknown:
            ap.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
        chosen = [e for e in args.engines.split(",") if e]
        if not chosen or set(chosen) - set(ENGINES):
            ap.error(f"--engines {args.engines!r}: choose from {', '.join(ENGINES)}")
        args.engine_list = [e for e in ENGINES if e in chosen]
        args.out_dir.mkdir(parents=True, exist_ok=True)
        given_urls = {e: getattr(args, f"{e}_url") for e in args.engine_list}
        with engines(given_urls) as urls:
            given = [e for e in args.engine_list if given_urls[e]]
            meta = machine(given, urls)
            done = [run_workload(name, urls, args) for name in names]
        summary = summarize(meta, done, args.out_dir)
        if args.merge and summary_path.is_file():
            summary = merged(json.loads(summary_path.read_text()), summary)
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {summary_path}")
    for path in draw_charts(json.loads(summary_path.read_text()), args.img_dir):
        print(f"wrote {path}")


@contextlib.contextmanager
def engines(given: dict[str, str | None]) -> Iterator[dict[str, str]]:
    """The chosen engines' URLs: the given ones, or servers started here (stopped on exit)."""
    with tempfile.TemporaryDirectory(prefix="kvroute-seed-") as tmp:
        state = StateDir(Path(tmp))
        urls: dict[str, str] = {}
        try:
            for engine, url_given in given.items():
                url = url_given
                if url is None:
                    t0 = time.perf_counter()
                    url = asyncio.run(_start(engine, state))
                    print(f"{engine} at {url} ({time.perf_counter() - t0:.0f} s to start)")
                urls[engine] = url
            yield urls
        finally:
            asyncio.run(_stop(state))


async def _start(engine: str, state: StateDir) -> str:
    async with httpx.AsyncClient() as client:
        records = await LocalEngines(state, client=client).up(
            engine, options=LAUNCH, lifetime=Lifetime.TIED_TO_PARENT
        )
    return records[0].base_url


async def _stop(state: StateDir) -> None:
    async with httpx.AsyncClient() as client:
        await LocalEngines(state, client=client).down()


def machine(urls_given: list[str], urls: dict[str, str]) -> dict[str, Any]:
    """What the numbers were measured on: CPUs, engines and their settings."""
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    meta: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "engines": list(urls),
    }
    if "llamacpp" in urls:
        meta["llama_server"] = _output([str(llama_server_path()), "--version"])
    # Read from the venvs' dist-info: importing vllm or sglang takes minutes on a busy box.
    if "vllm" in urls:
        meta["vllm"] = _dist_version(vllm_python_path(), "vllm_cpu")
    if "sglang" in urls:
        meta["sglang"] = _dist_version(sglang_python_path(), "sglang")
        meta["sglang_grammar_backend"] = sglang_grammar_backend(urls["sglang"])
    return meta | {
        "launch": {
            "parallel": LAUNCH.parallel,
            "ctx_tokens": LAUNCH.ctx_tokens,
            "threads": LAUNCH.threads,
            "vllm_block_size_tokens": LAUNCH.vllm_block_size_tokens,
            "vllm_kv_cache_gib": LAUNCH.vllm_kv_cache_gib,
            "vllm_enforce_eager": LAUNCH.vllm_enforce_eager,
            "sglang_max_total_tokens": LAUNCH.sglang_max_total_tokens,
            "sglang_page_size": LAUNCH.sglang_page_size,
        },
        "urls_given": urls_given,  # engines used at a given URL, not started here
    }


def _dist_version(python: Path, dist: str) -> str:
    """The installed version of distribution ``dist`` in the venv of ``python``."""
    found = sorted(python.parent.parent.glob(f"lib/python*/site-packages/{dist}-*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").split("-", 1)[1] if found else "unknown"


def sglang_grammar_backend(url: str) -> str | None:
    """The grammar backend the SGLang server resolved (its ``/get_server_info``): the one
    that constrained the ``json`` workload's answers."""
    try:
        info = httpx.get(f"{url}/get_server_info", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return None
    backend = info.get("grammar_backend") if isinstance(info, dict) else None
    return backend if isinstance(backend, str) else None


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` plus the workloads of ``old`` it did not run (each keeps its own machine
    reading under ``machine_by_workload``)."""
    ran = {w["workload"] for w in new["workloads"]}
    by_workload = dict(old.get("machine_by_workload", {}))
    for w in old["workloads"]:
        by_workload.setdefault(w["workload"], old["machine"])
    for w in ran:
        by_workload[w] = new["machine"]
    kept = [w for w in old["workloads"] if w["workload"] not in ran]
    return new | {
        "workloads": sorted(kept + new["workloads"], key=lambda w: _order((w["workload"], 0))),
        "rows": [r for r in old["rows"] if r["workload"] not in ran] + new["rows"],
        "machine_by_workload": by_workload,
    }


def _output(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = [x for x in (done.stdout + done.stderr).splitlines() if "version" in x.lower()]
    return (lines[0] if lines else (done.stdout.strip() or "unknown")).strip()


def run_workload(name: str, urls: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """One `kvroute bench` call: both endpoints, every load; returns where and how it ran."""
    out = args.out_dir / f"{name}.json"
    argv = [
        str(ROOT / ".venv" / "bin" / "kvroute"), "bench",
        *(a for e in args.engine_list for a in ("-e", f"{e}={urls[e]},engine={e}")),
        "-w", name,
        *(a for k, v in WORKLOADS[name].items() for a in ("-p", f"{k}={v}")),
        "-n", str(args.num_requests),
        "--seed", str(args.seed),
        "--concurrency", args.loads,
        "--ttft-timeout", "120", "--timeout", "240", "--max-duration", "600",
        "--json", str(out), "-q",
    ]  # fmt: skip
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    done = subprocess.run(argv, check=False)
    wall_s = time.perf_counter() - t0
    load_after = os.getloadavg()
    if done.returncode != 0 or not out.is_file():
        sys.exit(f"error: kvroute bench -w {name} failed (exit {done.returncode})")
    print(f"{name}: {wall_s:.0f} s, load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    return {
        "workload": name,
        "result": out.name,
        "wall_s": round(wall_s, 1),
        "loadavg_1m_before": round(load_before[0], 2),
        "loadavg_1m_after": round(load_after[0], 2),
        "loadavg_5m_after": round(load_after[1], 2),
    }


def _get(d: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def summarize(meta: dict[str, Any], done: list[dict[str, Any]], out_dir: Path) -> dict[str, Any]:
    """The figures the write-up quotes, one row per workload x engine x load."""
    rows = []
    for one in done:
        result = json.loads((out_dir / one["result"]).read_text())
        one["ideal_overlap"] = _get(result, "workload", "ideal_overlap")
        one["prompt_tokens"] = _get(result, "workload", "prompt_tokens")
        one["num_requests"] = _get(result, "workload", "num_requests")
        for run in result["runs"]:
            s = run["summary"]
            row: dict[str, Any] = {
                "workload": one["workload"],
                "engine": run["endpoint"]["engine"],
                "users": _get(run, "load", "concurrency"),
                "cache_state": run["endpoint"]["cache_state"],
                "num_ok": s["num_ok"],
                "num_errors": s["num_errors"],
                "errors": s["errors"],
                "request_per_s": s["request_throughput_per_s"],
                "output_tok_per_s": s["output_token_throughput_per_s"],
                "engine_hit": _get(s, "cache", "engine_hit_rate"),
                "response_hit": _get(s, "cache", "response_hit_rate"),
            }
            for fig in ("ttft_s", "tpot_s", "e2e_s"):
                for q in ("p50", "p95", "p99"):
                    row[f"{fig[:-2]}_{q}_s"] = _get(s, fig, q)
            if s.get("structured"):
                row["json_parse_rate"] = s["structured"]["parse_rate"]
                row["json_valid_rate"] = s["structured"]["valid_rate"]
            rows.append(row)
    return {"schema": "kvroute.seed/1", "machine": meta, "workloads": done, "rows": rows}


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "ms":
        return f"{1e3 * value:.0f}"
    return f"{value:.2f}"


_COLUMNS = (
    ("engine hit", "engine_hit", "pct"),
    ("TTFT p50 s", "ttft_p50_s", "s"),
    ("TTFT p95 s", "ttft_p95_s", "s"),
    ("TTFT p99 s", "ttft_p99_s", "s"),
    ("TPOT p50 ms", "tpot_p50_s", "ms"),
    ("E2E p50 s", "e2e_p50_s", "s"),
    ("E2E p99 s", "e2e_p99_s", "s"),
    ("req/s", "request_per_s", "s"),
    ("out tok/s", "output_tok_per_s", "s"),
)


def tables(summary: dict[str, Any]) -> str:
    """One markdown table per workload: engine x users rows, the quoted figures as columns."""
    out = []
    for one in summary["workloads"]:
        rows = [r for r in summary["rows"] if r["workload"] == one["workload"]]
        cols = list(_COLUMNS)
        if any("json_parse_rate" in r for r in rows):
            cols += [
                ("JSON parsed", "json_parse_rate", "pct"),
                ("schema-valid", "json_valid_rate", "pct"),
            ]
        out.append(f"#### {one['workload']}\n")
        out.append("| engine | users | ok / err | " + " | ".join(c[0] for c in cols) + " |")
        out.append("|---|---|---|" + "---:|" * len(cols))
        for r in sorted(rows, key=lambda r: (r["users"], ENGINES.index(r["engine"]))):
            cells = [_fmt(r.get(field), kind) for _, field, kind in cols]
            name = ENGINE_LABEL[r["engine"]]
            head = f"| {name} | {r['users']} | {r['num_ok']} / {r['num_errors']} | "
            out.append(head + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _label(workload: str, users: int) -> str:
    return f"{workload}, {users} user{'s' if users > 1 else ''}"


def draw_charts(summary: dict[str, Any], img_dir: Path) -> list[Path]:
    """Grouped bar charts (categories: workload × users; bars: engines) as SVG files."""
    rows = summary["rows"]
    keys = sorted({(r["workload"], r["users"]) for r in rows}, key=_order)
    labels = [_label(w, u) for w, u in keys]
    by = {(r["workload"], r["users"], r["engine"]): r for r in rows}
    engines = [e for e in ENGINES if any(r["engine"] == e for r in rows)]
    nan = float("nan")
    ideal = {w["workload"]: w["ideal_overlap"] or nan for w in summary["workloads"]}

    def bars(field: str) -> list[Bars]:
        out = []
        for e in engines:
            vals = [by.get((w, u, e), {}).get(field) for w, u in keys]
            out.append(Bars(ENGINE_LABEL[e], [nan if v is None else v for v in vals]))
        return out

    ideal_bars = Bars("ideal (kvroute analyze)", [ideal.get(w, nan) for w, _ in keys])
    x_label = "workload, closed-loop users"
    charts = {
        "seed-cache-hit.svg": bar_chart(
            labels, [*bars("engine_hit"), ideal_bars],
            title="Engine-reported prefix cache hit (cold start)", x_label=x_label,
            y_label="cached / prompt tokens", percent=True, width=860,
        ),
        "seed-ttft-p50.svg": bar_chart(
            labels, bars("ttft_p50_s"), title="TTFT p50 (from the scheduled send)",
            x_label=x_label, y_label="s", width=860,
        ),
        "seed-ttft-p99.svg": bar_chart(
            labels, bars("ttft_p99_s"), title="TTFT p99 (from the scheduled send)",
            x_label=x_label, y_label="s", width=860,
        ),
        "seed-e2e-p99.svg": bar_chart(
            labels, bars("e2e_p99_s"), title="End-to-end latency p99",
            x_label=x_label, y_label="s", width=860,
        ),
    }  # fmt: skip
    img_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, svg in charts.items():
        path = img_dir / name
        path.write_text(svg + "\n")
        paths.append(path)
    return paths


def _order(key: tuple[str, int]) -> tuple[int, int]:
    names = list(WORKLOADS)
    return (names.index(key[0]) if key[0] in names else len(names), key[1])


if __name__ == "__main__":
    main()
