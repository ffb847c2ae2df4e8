"""What capture's worker spends per record, offline: ``CaptureRecords.render`` over
chat bodies shaped like ``bench/gateway_overhead.py``'s (one user message, a request
number in each, optionally behind a long system prompt), in chunks of 16 as the
worker renders them.

Two measures. Time per record (median of repeats; this machine is noisy, so compare
trees by alternating runs). And, with ``--instructions``, instructions per record
inside ``render`` (the compiled build) counted by valgrind's callgrind: deterministic,
so two trees compare in one run each (the difference of two runs of different lengths,
so the one-time costs of the first records, template probes and memo warm-up, cancel
out)::

    PYTHONPATH=TREE/src .venv/bin/python bench/capture_render_cost.py --system-chars 4000
    PYTHONPATH=TREE/src .venv/bin/python bench/capture_render_cost.py --instructions [--same] [--keyed]

Instruction counts leave out what the gateway adds around the worker (caches cold
after the event loop's work, the bodies' deallocation, the interpreter lock): in the
gateway a record costs about 1.5-2x its offline time (``--capture-compare`` there).
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson

try:  # the compiled build, as kvroute serve runs it (a tree from before _accel: its own)
    from kvroute import _accel

    _accel.enable()
except ImportError:
    pass
from gateway_load import _body  # the gateway benches' request bodies
from kvroute.gateway.capture.records import CaptureEvent, CaptureRecords
from kvroute.gateway.capture.worker import RENDER_CHUNK
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.tokenizer import load_tokenizer


def _events(system_chars: int, same: bool, count: int, start: int) -> list[CaptureEvent]:
    out = []
    for i in range(start, start + count):
        body = orjson.loads(_body(system_chars=system_chars, tag="" if same else f" Request {i}."))
        out.append(
            CaptureEvent(body, 1.7e9, 1.7e9 + 0.01, None, "stub", None, "stub", 200, 40, 16, None)
        )
    return out


def _render_all(records: CaptureRecords, events: list[CaptureEvent]) -> None:
    for k in range(0, len(events), RENDER_CHUNK):
        lines, _ = records.render(events[k : k + RENDER_CHUNK], observed=True)
        b"\n".join([line for line in lines if isinstance(line, bytes)])


def _records(keyed: bool) -> CaptureRecords:
    return CaptureRecords(
        PromptTokens(load_tokenizer(None)),
        block_size_tokens=16,
        include_text=False,
        key=bytes(range(32)) if keyed else None,  # the gateway's capture always has a key
    )


def timed(args: argparse.Namespace) -> dict[str, Any]:
    records = _records(args.keyed)
    _render_all(records, _events(args.system_chars, args.same, args.warm, 0))
    per_record: list[float] = []
    for r in range(args.repeat):
        events = _events(args.system_chars, args.same, args.records, args.warm + r * args.records)
        gc.collect()
        gc.freeze()  # as kvroute serve does: the events are not the worker's garbage
        t0 = time.perf_counter()
        _render_all(records, events)
        per_record.append((time.perf_counter() - t0) / args.records * 1e6)
        gc.unfreeze()
    return {
        "us_per_record_median": round(statistics.median(per_record), 2),
        "us_per_record_runs": [round(x, 2) for x in per_record],
    }


def _count(args: argparse.Namespace, records: int) -> int:
    """Instructions callgrind counts over a run rendering ``records`` records."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/cg.out",
                "--collect-atstart=no",  # only inside render (the compiled function)
                "--toggle-collect=CPyDef_*CaptureRecords___render",
                sys.executable,
                __file__,
                "--system-chars",
                str(args.system_chars),
                "--records",
                str(records),
                "--warm",
                "0",
                "--repeat",
                "1",
                *(["--same"] if args.same else []),
                *(["--keyed"] if args.keyed else []),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : ([\d,]+)", out.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{out.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def instructions(args: argparse.Namespace) -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt install valgrind)")
    try:
        from kvroute._accel import GATEWAY as native
    except ImportError:  # a tree from before kvroute._accel
        from kvroute.gateway import native  # type: ignore[no-redef]

    if not native.status()[0]:
        raise SystemExit("--instructions counts the compiled build: run scripts/build-native")
    small, large = args.records // 5, args.records
    counts = {n: _count(args, n) for n in (small, large)}
    return {
        "instructions_per_record": round((counts[large] - counts[small]) / (large - small)),
        "records": [small, large],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system-chars", type=int, default=0, help="system prompt length")
    parser.add_argument("--same", action="store_true", help="the same body every time")
    parser.add_argument(
        "--keyed", action="store_true", help="hashes keyed, as kvroute serve writes them"
    )
    parser.add_argument("--records", type=int, default=4000, help="records per repeat")
    parser.add_argument("--warm", type=int, default=500, help="records rendered first, untimed")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with callgrind"
    )
    args = parser.parse_args()
    result = {"system_chars": args.system_chars, "same": args.same, "keyed": args.keyed}
    result |= instructions(args) if args.instructions else timed(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
