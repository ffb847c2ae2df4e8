"""The rows every bench report shows (terminal and HTML alike), formatted once."""

from __future__ import annotations

from collections.abc import Sequence

from kvroute.bench.compare import Diff
from kvroute.bench.metrics import Stat, Summary
from kvroute.bench.record import ErrorKind
from kvroute.bench.result import EndpointInfo, Run
from kvroute.report import fmt

RUN_HEADERS = (
    "endpoint",
    "load",
    "cache",
    "ok",
    "errors",
    "unsent/cut",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "E2E p50",
    "E2E p99",
    "req/s",
    "out tok/s",
    "rate achieved",
    "engine hit",
    "response hit",
    "goodput",
    "JSON valid",
)


SUMMARY_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Requests and latency",
        ("endpoint", "load", "cache", "ok", "errors", "unsent/cut", "TTFT p50", "TTFT p99",
         "TPOT p50", "E2E p50", "E2E p99"),
    ),
    (
        "Throughput, cache and goodput",
        ("endpoint", "load", "req/s", "out tok/s", "rate achieved", "engine hit",
         "response hit", "goodput", "JSON valid"),
    ),
)  # fmt: skip
"""The summary split in two tables, so that each fits a 1,400 px screen whole."""


def shown_headers(runs: Sequence[Run], headers: Sequence[str] = RUN_HEADERS) -> list[str]:
    """``headers`` without the columns that would hold nothing for these runs: no
    request unsent or cut, no structured output, no SLO."""
    empty = set()
    if not any(r.summary.num_not_sent or num_cut(r.summary) for r in runs):
        empty.add("unsent/cut")
    if all(r.summary.structured is None for r in runs):
        empty.add("JSON valid")
    if all(r.summary.goodput is None for r in runs):
        empty.add("goodput")
    return [h for h in headers if h not in empty]


def dur(value: float | None) -> str:
    return "—" if value is None else fmt.duration(value)


def pct(value: float | None) -> str:
    return "—" if value is None else fmt.percent(value)


def num(value: float | None) -> str:
    return "—" if value is None else fmt.si(value)


def stat_cells(s: Stat) -> list[str]:
    return [dur(s.p50), dur(s.p90), dur(s.p95), dur(s.p99), dur(s.max)]


def run_label(run: Run) -> str:
    rep = f" #{run.repeat + 1}" if run.repeat else ""
    return f"{run.endpoint.name} · {run.load.label}{rep}"


def num_cut(s: Summary) -> int:
    """Requests on the wire when Ctrl-C stopped the run: cut off by the user, not failed."""
    return s.errors.get(ErrorKind.INTERRUPTED.value, 0)


def run_row(run: Run) -> list[str]:
    s = run.summary
    cut = num_cut(s)
    good = "—" if s.goodput is None else f"{pct(s.goodput.share)} ({num(s.goodput.per_s)}/s)"
    valid = (
        "—"
        if s.structured is None
        else f"{pct(s.structured.valid_rate)} of {s.structured.num_requests}"
    )
    return [
        run.endpoint.name,
        run.load.label,
        run.endpoint.cache_state,
        fmt.count(s.num_ok),
        fmt.count(s.num_errors - cut),
        fmt.count(s.num_not_sent + cut),
        dur(s.ttft_s.p50),
        dur(s.ttft_s.p99),
        dur(s.tpot_s.p50),
        dur(s.e2e_s.p50),
        dur(s.e2e_s.p99),
        num(s.request_throughput_per_s),
        num(s.output_token_throughput_per_s),
        pct(s.rates.achieved_share),
        pct(s.cache.engine_hit_rate),
        pct(s.cache.response_hit_rate),
        good,
        valid,
    ]


def error_lines(run: Run) -> list[str]:
    s = run.summary
    cut = ErrorKind.INTERRUPTED.value
    parts = [f"{kind} {n}" for kind, n in s.errors.items() if kind != cut]
    if s.num_not_sent:
        parts.append(f"not sent {s.num_not_sent}")
    if s.errors.get(cut):
        parts.append(f"cut short by Ctrl-C {s.errors[cut]}")
    if s.num_cancelled:
        parts.append(f"cancelled (on purpose) {s.num_cancelled}")
    return parts


def compute_text(endpoint: EndpointInfo) -> str | None:
    """``"1 thread on CPU 0"``, ``"2 threads on CPUs 0-1"``; None when not recorded."""
    if endpoint.threads is None:
        return None
    text = fmt.plural(endpoint.threads, "thread")
    cpus = endpoint.cpus or []
    if len(cpus) == 1:
        text += f" on CPU {cpus[0]}"
    elif cpus:
        contiguous = cpus == list(range(cpus[0], cpus[-1] + 1))
        text += (
            f" on CPUs {cpus[0]}-{cpus[-1]}"
            if contiguous
            else (" on CPUs " + ",".join(str(c) for c in cpus))
        )
    return text


def endpoint_caveats(runs: Sequence[Run]) -> list[str]:
    """What differs between the endpoints of one load besides the engine: cache state,
    model, compute threads (1 thread against 2 says little about the engines)."""
    out = []
    states = {r.endpoint.name: r.endpoint.cache_state for r in runs}
    if len(set(states.values())) > 1:
        out.append(
            "Cache state: " + ", ".join(f"{n} {s}" for n, s in states.items()) + " (a warm "
            "cache hits where a cold one cannot)."
        )
    models = {r.endpoint.name: r.endpoint.model for r in runs if r.endpoint.model}
    if len(set(models.values())) > 1:
        out.append("Models: " + ", ".join(f"{n} {m}" for n, m in models.items()) + ".")
    compute = {r.endpoint.name: compute_text(r.endpoint) for r in runs}
    known = {n: c for n, c in compute.items() if c is not None}
    threads = {r.endpoint.threads for r in runs if r.endpoint.threads is not None}
    if len(threads) > 1:
        out.append(
            "Compute: " + ", ".join(f"{n} {c}" for n, c in known.items()) + " (latency and "
            "throughput then compare the threads as much as the engines; give each the same)."
        )
    elif known and len(known) < len(compute):
        unknown = ", ".join(n for n, c in compute.items() if c is None)
        out.append(
            "Compute: " + ", ".join(f"{n} {c}" for n, c in known.items()) + f"; {unknown} "
            "not recorded (add threads=N to its -e to compare like with like)."
        )
    return out


def diff_cells(d: Diff) -> list[str]:
    def value(v: float | None) -> str:
        if v is None:
            return "—"
        return dur(v) if d.unit == "s" else pct(v) if d.unit == "share" else f"{num(v)}/s"

    # A difference below a millionth of the figures themselves is float noise of
    # zero ("+0.0000000555 ns" said nothing a reader could use).
    scale = max(abs(d.a or 0.0), abs(d.b or 0.0))

    def delta(v: float | None) -> str:
        if v is None:
            return "—"
        if abs(v) <= 1e-6 * scale:
            v = 0.0
        sign = "+" if v >= 0 else "-"
        return sign + value(abs(v)) if d.unit != "share" else f"{v * 100:+.1f} pp"

    noise = (
        "n/a"
        if d.noise_low is None or d.noise_high is None
        else f"[{delta(d.noise_low)}, {delta(d.noise_high)}]"
    )
    verdict = (
        "—"
        if d.within_noise is None
        else "within noise"
        if d.within_noise
        else f"{d.better} better"
    )
    rel = "—" if d.relative is None else fmt.relative(d.relative)
    return [d.name, value(d.a), value(d.b), delta(d.delta), rel, noise, verdict]


DIFF_HEADERS = ("figure", "A", "B", "B − A", "relative", "noise interval", "verdict")
