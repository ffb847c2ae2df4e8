"""Peers' hash-only traces read by kvroute without a rejected record.

The peers' own code writes (llmtrafficlens 0.13: ``export_jsonl`` to its mooncake and
bailian formats) or validates (kvcache-simulator 0.1: ``parse_trace_lines``) the traces;
kvroute then reads them strictly (no ``--skip-invalid``) and analyzes them. The peers
are not dependencies: unpack their wheels (``pip download --no-deps kvcache-simulator
llmtrafficlens``, then unzip) and pass the folder.

    .venv/bin/python bench/peer_formats_check.py /tmp/peers
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from kvroute.analyze.run import AnalyzeOptions, analyze_requests
from kvroute.analyze.warmup import Warmup
from kvroute.trace.formats.base import ReadOptions
from kvroute.trace.readers import detect_format, read_trace
from kvroute.trace.synthetic import sample_log


def _texts(n: int) -> list[str]:
    """Prompt texts with shared system prompts and sessions: kvroute's sample log."""
    out = []
    for rec in sample_log(n, seed=3):
        body = rec["request"]
        out.append("\n".join(str(m.get("content", "")) for m in body["messages"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("peers", type=Path, help="folder holding the unpacked peer wheels")
    ap.add_argument("-n", type=int, default=2000)
    args = ap.parse_args()
    sys.path.insert(0, str(args.peers))
    from kvcache_sim.trace import parse_trace_lines  # type: ignore[import-not-found]
    from llmtrafficlens.export import export_jsonl  # type: ignore[import-not-found]
    from llmtrafficlens.hashing import text_to_blocks  # type: ignore[import-not-found]
    from llmtrafficlens.metrics import hit_rate  # type: ignore[import-not-found]
    from llmtrafficlens.model import Request as LtRequest  # type: ignore[import-not-found]

    block = 16
    lt_requests = [
        LtRequest(
            ts_ms=i * 250,
            input_tokens=len(t) // 4,
            output_tokens=20,
            blocks=text_to_blocks(t, block, b"peer-check"),
            session_key=f"s{i % 50}",
            turn=1,
            ts_exact=True,
        )
        for i, t in enumerate(_texts(args.n))
    ]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for fmt in ("mooncake", "bailian"):
            path = Path(d) / f"lt_{fmt}.jsonl"
            export_jsonl(lt_requests, path, fmt, block)
            rows.append(_read("llmtrafficlens " + fmt, path, block))
        # the same definition both sides: whole 16-token blocks, unbounded cache
        for row in rows:
            row["peer_block_hit_cold"] = hit_rate(lt_requests, block, None, 0.0)
            row["peer_block_hit_warm50"] = hit_rate(lt_requests, block, None, 0.5)
        # kvcache-simulator's own fields: per-record block_size, string ids, block_tokens
        ks_path = Path(d) / "ks.jsonl"
        with ks_path.open("wb") as f:
            for r in lt_requests:
                ids = [f"b{h:x}" for h in r.blocks]
                if not ids:
                    continue
                n_tok = min(r.input_tokens, len(ids) * block)
                n_tok = max(n_tok, (len(ids) - 1) * block + 1)
                tokens = [block] * (len(ids) - 1) + [n_tok - (len(ids) - 1) * block]
                f.write(
                    orjson.dumps(
                        {
                            "block_size": block,
                            "input_length": n_tok,
                            "hash_ids": ids,
                            "block_tokens": tokens,
                        }
                    )
                    + b"\n"
                )
        peer = parse_trace_lines(ks_path.read_text().splitlines())
        row = _read("kvcache-simulator input", ks_path, None)
        row["peer_requests"] = peer.request_count
        row["peer_skipped"] = peer.skipped_records + peer.parse_errors
        rows.append(row)
    print(json.dumps(rows, indent=2))
    out = Path(__file__).with_name("peer_formats_results.json")
    out.write_text(json.dumps(rows, indent=2) + "\n")


def _read(name: str, path: Path, block: int | None) -> dict[str, Any]:
    fmt = detect_format(path)
    reqs = list(read_trace(path, fmt, options=ReadOptions(block_size_tokens=block)))
    records = sum(1 for line in path.read_text().splitlines() if line.strip())
    res = analyze_requests(reqs, trace_path=str(path), trace_format=fmt, tokenizer_name=None)
    warm = analyze_requests(
        reqs,
        trace_path=str(path),
        trace_format=fmt,
        tokenizer_name=None,
        options=AnalyzeOptions(warmup=Warmup(share_requests=0.5)),
    )
    return {
        "export": name,
        "detected_as": fmt,
        "records": records,
        "read": len(reqs),
        "rejected": records - len(reqs),
        "kvroute_hit_blocks_plus_repeats": res.overlap.hit_ratio,
        "kvroute_block_hit": res.overlap.block_hit_ratio,
        "kvroute_block_hit_warmup50": warm.overlap.block_hit_ratio,
    }


if __name__ == "__main__":
    main()
