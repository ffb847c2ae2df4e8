"""The simulate terminal summary: one row per engine with its own figures, the sweep, notes."""

from __future__ import annotations

import re

from rich.console import Console

from kvroute.cache.result import SimulationResult
from kvroute.report import fmt
from kvroute.report.simulate.console import capacity_line, render_console, slots_text

from .conftest import CACHED_TOKENS, PROMPT_TOKENS


def printed(result: SimulationResult, width: int = 200) -> str:
    console = Console(record=True, width=width)
    render_console(result, console)
    return console.export_text()


def test_each_engine_row_shows_its_hit_cached_and_computed_tokens(
    simulation: SimulationResult,
) -> None:
    out = printed(simulation)
    hit = fmt.percent(CACHED_TOKENS / PROMPT_TOKENS)
    cached, computed = fmt.tokens(CACHED_TOKENS), fmt.tokens(PROMPT_TOKENS - CACHED_TOKENS)
    for engine in ("llamacpp", "vllm", "sglang"):
        row = re.search(rf"^\s*{engine}\s+(\S+ %)\s+(\S+)\s+(\S+)", out, re.M)
        assert row is not None, out
        assert row.groups() == (hit, cached, computed)


def test_the_sweep_has_a_row_per_capacity(simulation: SimulationResult) -> None:
    out = printed(simulation)
    sweep = out[out.index("Hit ratio vs KV capacity") :]
    # a 128-token prompt never fits a 64-token pool: every request is rejected there
    assert re.search(r"^\s*64 tokens\s+0\.0 % \(20 rej\.\)\s+0\.0 % \(20 rej\.\)", sweep, re.M)
    assert re.search(
        rf"^\s*{re.escape(fmt.capacity(1 << 16))} tokens(\s+71\.2 %){{3}}", sweep, re.M
    )


def test_a_narrow_terminal_keeps_engine_and_hit_and_names_the_columns_left_out(
    simulation: SimulationResult,
) -> None:
    out = printed(simulation, width=40)
    assert re.search(r"^\s*vllm\s+71\.2 %", out, re.M)
    words = " ".join(out.split())
    assert "5 columns left out to fit 40 columns: w/ hit, p50, evicted, pinned, rej." in words


def test_capacity_and_slots_read_as_the_user_would_type_them(simulation: SimulationResult) -> None:
    assert fmt.capacity(1 << 16) in capacity_line(simulation)
    assert slots_text(4) == "4 slots: llama-server's default --parallel; --parallel N to change"
    assert slots_text(1) == "1 slot, --parallel 1"
