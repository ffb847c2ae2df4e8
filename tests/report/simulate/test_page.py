"""The simulate page: engines against the ideal, each engine's own hit in its bar."""

from __future__ import annotations

from datetime import UTC, datetime
from html import unescape

from kvroute.cache.result import SimulationResult
from kvroute.report import fmt
from kvroute.report.page.html import render_page
from kvroute.report.simulate.page import simulation_page

from .conftest import CACHED_TOKENS, PROMPT_TOKENS

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_engines_hit_is_on_the_page_with_the_trace_named(
    simulation: SimulationResult,
) -> None:
    page = simulation_page(simulation, NOW)
    html = unescape(render_page(page)).replace("\xa0", " ")
    hit = fmt.percent(CACHED_TOKENS / PROMPT_TOKENS)
    assert "shared.jsonl" in html
    for engine in ("llamacpp", "vllm", "sglang"):
        assert f"{engine}: {hit}" in html  # the bar's tooltip
    assert page.sections and all(s.title for s in page.sections)
