"""Terminal summary of a simulation: one table of engines against the ideal, the sweep, notes."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from kvroute.cache.compare import CachedTokensComparison
from kvroute.cache.result import Curve, EngineRun, Ideal, SimulationResult
from kvroute.report import fmt
from kvroute.report.console_fit import Parts, fit_columns, left_out_note


def _capacity_text(tokens: int | None) -> str:
    return "unbounded" if tokens is None else f"{fmt.capacity(tokens)} tokens"


def capacity_line(result: SimulationResult) -> str:
    """How the KV pool was sized, in one line."""
    c = result.capacity
    text = _capacity_text(c.tokens)
    if c.gpu is not None and c.model is not None:
        gpus = f"{c.num_gpus} x " if c.num_gpus > 1 else ""
        text += f" ({c.model} on {gpus}{c.gpu} at {c.utilization:.0%})"
    elif c.model is not None:
        text += f" ({c.model})"
    if c.kv_bytes_per_token:
        text += f", {fmt.byte_size(c.kv_bytes_per_token)} per token"
    return text


def _rate(per_s: float) -> str:
    return (
        f"{fmt.si(per_s, digits=2)} req/s"
        if per_s >= 0.1
        else f"{fmt.si(per_s * 60, digits=2)} req/min"
    )


def saturation_text(run: EngineRun) -> str | None:
    """The saturated verdict of ``run`` in one sentence; None when it kept up."""
    s = run.saturation
    if s is None or not s.saturated:
        return None
    text = (
        f"{run.engine} is saturated: requests arrive at {_rate(s.offered_rate_per_s)} and it "
        f"sustains about {_rate(s.sustained_rate_per_s)}, so its queue grows for the whole trace"
    )
    if run.wait_s.p90 is not None:
        text += f" (wait p90 {fmt.duration(run.wait_s.p90)})"
    text += "; its hit ratio is a backlog's, not live traffic's"
    slots = run.settings.get("num_slots")
    if run.engine == "llamacpp" and isinstance(slots, int):
        text += f". It runs {fmt.plural(slots, 'request')} at once ({slots_text(slots)})"
    return text + "."


def slots_text(num_slots: int) -> str:
    """What llama.cpp's slot count is, in words: the default is worth saying so."""
    if num_slots == 4:
        return "4 slots: llama-server's default --parallel; --parallel N to change"
    return f"{fmt.plural(num_slots, 'slot')}, --parallel {num_slots}"


def _engine_row(run: EngineRun, best: float) -> list[str]:
    d = run.per_request_hit
    name = f"[bold]{run.engine}[/]" if run.hit_ratio == best else run.engine
    if run.saturation is not None and run.saturation.saturated:
        name += " [yellow](saturated)[/]"
    return [
        name,
        fmt.percent(run.hit_ratio),
        fmt.tokens(run.cached_tokens),
        fmt.tokens(run.computed_tokens),
        fmt.percent(run.share_requests_with_hit, digits=0),
        fmt.percent(d.p50),
        fmt.tokens(run.evicted_tokens),
        fmt.tokens(run.peak_pinned_tokens),
        fmt.count(run.num_rejected),
    ]


_HEADERS = ("engine", "hit", "cached", "computed", "w/ hit", "p50", "evicted", "pinned", "rej.")
LEGEND = (
    "hit: prompt tokens served from cache · cached / computed: prompt tokens reused / "
    "prefilled · w/ hit: requests with any hit · p50: median share of a prompt served "
    "from cache · evicted: cached tokens dropped for room · pinned: most tokens held by "
    "running requests at once · rej.: requests that never fit the pool"
)
"""What the engines table's short headers mean (printed under it)."""


def _headline(r: SimulationResult) -> Parts:
    tr = r.trace
    return Parts(
        [
            f"[bold]kvroute simulate[/] {tr.path}",
            tr.format,
            fmt.plural(tr.num_requests, "request"),
            f"{fmt.count(tr.num_skipped)} skipped" if tr.num_skipped else "",
            f"{fmt.tokens(tr.prompt_tokens)} prompt tokens",
            f"tokenizer {tr.tokenizer}" if tr.tokenizer else "",
            f"{tr.block_size_tokens}-token block hashes" if tr.block_size_tokens else "",
        ]
    )


def _engines_table(r: SimulationResult, console: Console) -> tuple[Table, list[str]]:
    """One row per engine, the best hit ratio in bold; the columns that fit the
    console (engine and hit always), and the headers left out."""
    best = max((e.hit_ratio for e in r.engines), default=0.0)
    rows = [_engine_row(run, best) for run in r.engines]

    def build(columns: Sequence[int]) -> Table:
        t = Table(
            title="Prefix cache by engine",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for i in columns:
            h = _HEADERS[i]
            t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True, min_width=len(h))
        for row in rows:
            t.add_row(*(row[i] for i in columns))
        return t

    table, dropped = fit_columns(console, build, range(len(_HEADERS)), essential=2)
    return table, [_HEADERS[i] for i in dropped]


def _ideal_line(ideal: Ideal) -> str:
    own = "token level" if ideal.granularity == "token" else "blocks + repeats"
    line = f"ideal cache (analyze): {fmt.percent(ideal.hit_ratio)} {own}"
    if ideal.granularity == "token" or ideal.block_hit_ratio != ideal.hit_ratio:
        line += f", {fmt.percent(ideal.block_hit_ratio)} at {ideal.block_size_tokens}-token blocks"
    return line


def _details_line(run: EngineRun) -> Parts:
    """Peak memory and running requests, wait, and the engine's own counters (dim)."""
    extra = []
    slots = run.settings.get("num_slots")
    if run.engine == "llamacpp" and isinstance(slots, int):
        extra.append(slots_text(slots))
    if run.peak_pinned_bytes is not None:
        extra.append(f"peak pinned {fmt.byte_size(run.peak_pinned_bytes)}")
    extra.append(f"peak running {run.peak_running}")
    if run.wait_s.p90 is not None:
        extra.append(f"wait p90 {fmt.duration(run.wait_s.p90)}")
    extra += [f"{k.replace('_', ' ')} {fmt.tokens(v)}" for k, v in run.counters.items()]
    return Parts([f"{run.engine}: {extra[0]}", *extra[1:]], style="dim")


def _vs_reported_line(engine: str, v: CachedTokensComparison) -> str:
    return (
        f"{engine} vs engine-reported cached tokens ({fmt.plural(v.num_requests, 'request')}): "
        f"predicted {fmt.percent(v.predicted_hit_ratio)}, reported {fmt.percent(v.observed_hit_ratio)}, "
        f"mean |error| {v.mean_abs_error_tokens:.1f} tokens"
    )


def _sweep_table(sweep: list[Curve], console: Console) -> tuple[Table, list[str]]:
    """One row per capacity, one column per engine (with its rejections) that fits."""
    rows = [
        [
            f"{fmt.capacity(cap)} tokens",
            *[
                fmt.percent(c.hit_ratio[i])
                + (f" ({c.num_rejected[i]} rej.)" if c.num_rejected[i] else "")
                for c in sweep
            ],
        ]
        for i, cap in enumerate(sweep[0].capacity_tokens)
    ]
    headers = ["capacity", *(c.engine for c in sweep)]

    def build(columns: Sequence[int]) -> Table:
        s = Table(
            title="Hit ratio vs KV capacity",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for i in columns:
            s.add_column(headers[i], justify="right", no_wrap=True)
        for row in rows:
            s.add_row(*(row[i] for i in columns))
        return s

    table, dropped = fit_columns(console, build, range(len(headers)), essential=2)
    return table, [headers[i] for i in dropped]


def render_console(result: SimulationResult, console: Console) -> None:
    """Print the summary of ``result`` to ``console``."""
    r = result
    console.print(_headline(r))
    if r.trace.tokenizer_warning is not None:
        console.print(f"[yellow]warning: {r.trace.tokenizer_warning}[/]")
    console.print(
        Parts(
            [
                f"KV pool: {capacity_line(r)}",
                f"arrivals: {r.replay.arrivals}",
                f"run times: {fmt.count(r.replay.num_trace_run_times)} from the trace, rest "
                "modelled",
            ]
        )
    )
    table, dropped = _engines_table(r, console)
    console.print(table)
    console.print(Parts(LEGEND.split(" · "), style="dim"))
    if dropped:
        console.print(left_out_note(dropped, console.width, "COLUMNS=160 or --json"))
    if r.ideal is not None:
        console.print(_ideal_line(r.ideal))
    for run in r.engines:
        console.print(_details_line(run))
    for run in r.engines:
        verdict = saturation_text(run)
        if verdict is not None:
            console.print(f"[yellow]{verdict}[/]")
    for run in r.engines:
        if run.vs_reported is not None:
            console.print(_vs_reported_line(run.engine, run.vs_reported))
    if r.sweep:
        sweep, dropped = _sweep_table(r.sweep, console)
        console.print(sweep)
        if dropped:
            console.print(left_out_note(dropped, console.width, "COLUMNS=160 or --json"))
    for note in r.notes:
        console.print(f"[dim]note: {note}[/]")
