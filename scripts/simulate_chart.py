"""Write the hit-vs-capacity chart of `kvroute simulate --sweep-capacity` as a standalone SVG.

Run:  .venv/bin/python scripts/simulate_chart.py TRACE OUT.svg [--capacity-tokens 64k]
          [--model NAME]

Replays TRACE as `kvroute simulate TRACE --sweep-capacity --capacity-tokens N [--model M]`
does with every other option at its default, builds the HTML report's page and writes
the SVG of its "Hit ratio vs KV capacity" chart, byte for byte what the page embeds. The
README's simulate example (docs/img/simulate-capacity.svg) is made with:

    .venv/bin/kvroute sample logs.jsonl
    .venv/bin/python scripts/simulate_chart.py logs.jsonl docs/img/simulate-capacity.svg \\
        --capacity-tokens 64k --model llama-3.1-8b
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from kvroute.cache.capacity import DEFAULT_UTILIZATION
from kvroute.cache.simulate import SimulateOptions, simulate
from kvroute.cli.simulate.capacity import resolve_capacity
from kvroute.cli.simulate.trace import ideal_cache, load_trace
from kvroute.errors import KvrouteError
from kvroute.report.page.html import Chart
from kvroute.report.simulate.page import simulation_page

SECTION = "Hit ratio vs KV capacity"


def capacity_chart_svg(trace: Path, capacity_tokens: str, model: str | None) -> str:
    console = Console(quiet=True)
    block_size = SimulateOptions().settings.vllm.block_size_tokens
    capacity = resolve_capacity(
        capacity_tokens, None, block_size, model, None, 1, DEFAULT_UTILIZATION, "auto", None, None
    )
    requests, source = load_trace(trace, None, None, None, False, console)
    ideal = ideal_cache(requests, source, block_size, console)
    result = simulate(
        requests, capacity, source, options=SimulateOptions(auto_sweep=True), ideal=ideal
    )
    page = simulation_page(result, datetime.now(UTC))
    for section in page.sections:
        if section.title == SECTION:
            for block in section.blocks:
                if isinstance(block, Chart):
                    return block.svg
    raise SystemExit(f"error: the report has no {SECTION!r} chart (was the sweep empty?)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--capacity-tokens", default="64k")
    parser.add_argument("--model")
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        raise SystemExit(
            f"error: {args.trace} is not a file (make one: kvroute sample {args.trace})"
        )
    try:
        svg = capacity_chart_svg(args.trace, args.capacity_tokens, args.model)
    except KvrouteError as exc:
        raise SystemExit(
            f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else "")
        ) from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
