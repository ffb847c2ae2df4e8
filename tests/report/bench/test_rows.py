"""The rows every bench report shows: each run's own figures, empty columns dropped."""

from __future__ import annotations

from dataclasses import replace

from kvroute.bench.compare import Diff
from kvroute.report.bench.rows import (
    RUN_HEADERS,
    compute_text,
    diff_cells,
    endpoint_caveats,
    error_lines,
    run_label,
    run_row,
    shown_headers,
)

from .results import result, run


def test_a_run_row_holds_its_counts_load_and_response_hit() -> None:
    r = run("llama", 0, 2.0, 0.2, cached=90)
    row = dict(zip(RUN_HEADERS, run_row(r), strict=True))
    assert (row["endpoint"], row["load"], row["cache"]) == ("llama", "rate=2/s", "cold")
    assert (row["ok"], row["errors"], row["unsent/cut"]) == ("20", "0", "0")
    # 10 of 20 requests had 90 of 100 prompt tokens cached: 900 of 2,000
    assert row["response hit"] == "45.0 %"
    assert row["JSON valid"] == "—"  # no structured output asked for
    assert run_label(replace(r, repeat=1)) == "llama · rate=2/s #2"


def test_columns_that_would_hold_nothing_are_not_shown() -> None:
    runs = result(0.2).runs
    shown = shown_headers(runs)
    assert "unsent/cut" not in shown and "JSON valid" not in shown
    assert "goodput" in shown  # the runs were given an SLO
    cut = replace(runs[0], summary=replace(runs[0].summary, num_not_sent=2))
    assert "unsent/cut" in shown_headers([cut, *runs[1:]])


def test_errors_are_listed_by_kind_with_ctrl_c_apart() -> None:
    r = run("vllm", 0, 2.0, 0.2, cached=0)
    broken = replace(
        r, summary=replace(r.summary, errors={"timeout": 2, "interrupted": 1}, num_not_sent=3)
    )
    assert error_lines(broken) == ["timeout 2", "not sent 3", "cut short by Ctrl-C 1"]
    assert error_lines(r) == []


def test_compute_threads_and_cpus_read_as_a_person_would_say_them() -> None:
    e = run("llama", 0, 2.0, 0.2, 0).endpoint
    assert compute_text(e) is None
    assert compute_text(replace(e, threads=1, cpus=[0])) == "1 thread on CPU 0"
    assert compute_text(replace(e, threads=4, cpus=[2, 3, 4, 5])) == "4 threads on CPUs 2-5"
    assert compute_text(replace(e, threads=2, cpus=[0, 2])) == "2 threads on CPUs 0,2"


def test_endpoints_that_differ_in_cache_state_or_model_get_a_caveat() -> None:
    runs = result(0.2).runs[:2]  # llama at both loads: alike with itself
    assert endpoint_caveats(runs) == []
    llama, vllm = result(0.2).runs[0], result(0.2).runs[2]
    warm = replace(vllm, endpoint=replace(vllm.endpoint, cache_state="warm", model="other"))
    caveats = endpoint_caveats([llama, warm])
    assert caveats[0].startswith("Cache state: llama cold, vllm warm")
    assert caveats[1] == "Models: llama m, vllm other."


def test_a_difference_of_float_noise_reads_as_zero() -> None:
    d = Diff("TPOT p50", "s", 0.05, 0.05, 0.0, 0.0, -5.55e-17, 5.55e-17, True, None)
    cells = diff_cells(d)
    assert cells[5] == "[+0 s, +0 s]", cells
    assert cells[6] == "within noise"
