"""The traffic window as the outside sees it: what a finished request adds to it,
the ``/metrics`` gauges and counters, and the ``GET /kvroute/status`` page
(self-contained HTML, or JSON with ``?format=json``)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from kvroute.analyze.result import EQUIVALENT_BELOW, RADIX_ABOVE, VerdictLevel
from kvroute.gateway.ops.prometheus import Counter, Gauge, MirroredCounter, render
from kvroute.gateway.outcome import Outcome
from kvroute.gateway.traffic.shape import BAND_WORDS, TrafficShape, band_of
from kvroute.trace.hashing import chain_hashes

NOT_TOKENIZED = (
    "prefix overlap not measured: no cache_aware route tokenizes prompts on this gateway "
    "and capture is off (add a cache_aware route or a capture: section); class shares and "
    "engine-reported hit rates only"
)


NO_TOKENIZED_YET = (
    "prefix overlap not measured yet: no tokenized request answered in the window so far "
    "(the cache_aware route or capture tokenizes each prompt it sees)"
)


def observe_outcome(traffic: TrafficShape, outcome: Outcome, now_s: float) -> None:
    """An answered request into the window: class, backend, engine usage and, when the
    route tokenized its prompt (cache_aware), its prompt blocks and the predicted hit
    on the backend the policy chose (compared only when that backend answered)."""
    workload = outcome.workload.value
    lease = outcome.plan.lease
    if lease is None:
        traffic.observe(
            now_s,
            workload=workload,
            backend=outcome.backend,
            usage_prompt_tokens=outcome.prompt_tokens,
            reported_cached_tokens=outcome.cached_tokens,
        )
        return
    prediction, block = lease.prediction, traffic.config.block_size_tokens
    keys = next((s.keys for s in prediction.seqs if s.unit_tokens == block), None)
    if keys is None:
        keys = chain_hashes(prediction.token_ids, block)
    predicted = lease.predicted_cached_tokens if outcome.backend == lease.backend else None
    traffic.observe(
        now_s,
        workload=workload,
        backend=outcome.backend,
        block_hashes=keys,
        num_tokens=prediction.num_tokens,
        usage_prompt_tokens=outcome.prompt_tokens,
        reported_cached_tokens=outcome.cached_tokens,
        predicted_cached_tokens=predicted,
    )


def status(
    traffic: TrafficShape,
    now_s: float,
    backend_names: Sequence[str] = (),
    *,
    tokenizes: bool = False,
) -> dict[str, Any]:
    """The window's numbers (the JSON of ``/kvroute/status?format=json``).
    ``backend_names``: the configured backends, listed (with zeros) even when idle;
    ``tokenizes``: a cache_aware route or capture tokenizes prompts, so an unmeasured
    overlap only means none has been answered in the window yet."""
    traffic.refresh(now_s)
    cfg = traffic.config
    overlap = traffic.overlap
    level = band_of(overlap) if overlap is not None else None
    return {
        "window": {
            "max_requests": cfg.window_requests,
            "max_age_s": cfg.window_s,
            "num_requests": traffic.num_requests,
            "num_tokenized": traffic.num_tokenized,
            "block_size_tokens": cfg.block_size_tokens,
        },
        "prefix_overlap": overlap,
        "prompt_tokens": traffic.num_tokens,
        "reused_tokens": traffic.matched_tokens,
        "overlap_note": None
        if overlap is not None
        else NO_TOKENIZED_YET
        if tokenizes
        else NOT_TOKENIZED,
        "band_now": level.value if level is not None else None,
        "band": traffic.band.value if traffic.band is not None else None,
        "band_meaning": BAND_WORDS[traffic.band] if traffic.band is not None else None,
        "thresholds": {"equivalent_below": EQUIVALENT_BELOW, "radix_above": RADIX_ABOVE},
        "band_hold_s": cfg.band_hold_s,
        "band_changes": [
            {"band": c.band.value, "overlap": c.overlap, "message": c.message}
            for c in traffic.changes
        ],
        "class_shares": traffic.class_shares(),
        "history": {
            "bucket_s": traffic.history.bucket_s,
            "minutes": traffic.history.minutes(now_s, list(backend_names)),
        },
        "backends": {
            name: {
                "requests": t.num_requests,
                "prompt_tokens": t.prompt_tokens,
                "cached_tokens": t.cached_tokens,
                "hit_ratio": t.hit_ratio,
                "predicted_requests": t.num_predicted,
                "predicted_cached_tokens": t.predicted_tokens,
                "reported_cached_tokens": t.reported_tokens,
                "prediction_mean_abs_error_tokens": t.mean_abs_error_tokens,
                "prediction_abs_error_ratio": t.abs_error_ratio,
            }
            for name, t in sorted(traffic.backends.items())
        }
        | {name: _IDLE_BACKEND for name in backend_names if name not in traffic.backends},
    }


_IDLE_BACKEND: dict[str, Any] = {
    "requests": 0,
    "prompt_tokens": 0,
    "cached_tokens": 0,
    "hit_ratio": None,
    "predicted_requests": 0,
    "predicted_cached_tokens": 0,
    "reported_cached_tokens": 0,
    "prediction_mean_abs_error_tokens": None,
    "prediction_abs_error_ratio": None,
}
"""A backend with no request in the window: shown, so an idle one is not mistaken for
one the gateway does not know."""

REFRESH_S = 10
"""The status page reloads itself this often."""


def _pct(x: float | None) -> str:
    # a non-breaking space: the browser never wraps "40.0" from its "%"
    return "–" if x is None else f"{100 * x:.1f}\u00a0%"


def status_html(data: dict[str, Any]) -> bytes:
    """A small page with the numbers of :func:`status`; no scripts, no external files."""
    e = html.escape
    w = data["window"]
    band = data["band"]
    colour = {"equivalent": "#2b7", "grey_zone": "#c90", "radix_pays": "#37c"}.get(
        band or "", "#888"
    )
    rows = (
        "".join(
            f"<tr><td>{e(k)}</td><td>{_pct(v)}</td></tr>" for k, v in data["class_shares"].items()
        )
        or "<tr><td colspan=2>no request in the window yet</td></tr>"
    )
    brows = "".join(
        f"<tr><td>{e(name)}</td><td>{b['requests']}</td><td>{_pct(b['hit_ratio'])}</td>"
        f"<td>{b['predicted_cached_tokens']:,} / {b['reported_cached_tokens']:,}</td>"
        f"<td>{_pct(b['prediction_abs_error_ratio'])}</td></tr>"
        for name, b in data["backends"].items()
    )
    overlap = (
        f"<p class=big>{_pct(data['prefix_overlap'])}</p><p>prefix overlap: "
        f"{data['reused_tokens']:,} of {data['prompt_tokens']:,} prompt tokens already in the "
        f"window ({w['num_tokenized']} tokenized requests, {w['block_size_tokens']}-token blocks)</p>"
        if data["prefix_overlap"] is not None
        else f"<p>{e(data['overlap_note'])}</p>"
    )
    band_now = data["band_now"]
    if band is None and band_now is not None:
        # The overlap is in a band but has not stayed there band_hold_s yet.
        band_line = (
            f"Band: settling on {e(band_now)} (in it now; it counts once it holds "
            f"{data['band_hold_s']:g} s)"
        )
    else:
        band_line = f"Band: {e(band or 'none yet')}"
    meaning = e(data["band_meaning"] or "no settled band yet")
    changes = "".join(f"<li>{e(c['message'])}</li>" for c in reversed(data["band_changes"]))
    history = _history_html(data["history"]["minutes"])
    page = f"""<!doctype html><html><head><meta charset=utf-8>
<meta http-equiv=refresh content={REFRESH_S}>
<title>kvroute traffic shape</title><style>
body{{font:14px system-ui,sans-serif;margin:2em;max-width:60em;color:#222}}
table{{border-collapse:collapse;margin:.5em 0 1.5em}}td,th{{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}}
.big{{font-size:2.4em;margin:.2em 0}}.bar{{display:inline-block;height:.7em;background:#37c;margin-right:.4em}}
td.n{{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}}td:first-child{{white-space:nowrap}}.band{{border-left:6px solid {colour};padding:.3em .8em}}
</style></head><body>
<h1>Live traffic shape</h1>
<p>Window: the last {w["num_requests"]} requests (at most {w["max_requests"]}, none older
than {w["max_age_s"]:g} s).</p>
{overlap}
<p class=band><b>{band_line}</b> — {meaning}. Thresholds
{_pct(data["thresholds"]["equivalent_below"])} / {_pct(data["thresholds"]["radix_above"])},
held {data["band_hold_s"]:g} s.</p>
<ul>{changes}</ul>
<h2>Share by workload class</h2><table><tr><th>class</th><th>share</th></tr>{rows}</table>
<h2>Backends</h2><table><tr><th>backend</th><th>requests</th><th>engine-reported hit</th>
<th>predicted / reported cached tokens</th><th>prediction error ÷ prompt</th></tr>{brows}</table>
{history}
<p>Reloads every {REFRESH_S} s. JSON: <a href="?format=json">?format=json</a></p>
</body></html>
"""
    return page.encode()


def _history_html(minutes: list[dict[str, Any]]) -> str:
    """The last minutes, newest first: requests (with a bar), the prefix overlap of
    that minute's tokenized requests, and each backend's requests and engine hit."""
    if not minutes:
        return "<h2>Last minutes</h2><p>No request answered yet.</p>"
    e = html.escape
    names = list(minutes[0]["backends"])
    peak = max(m["requests"] for m in minutes) or 1
    head = "".join(f"<th>{e(n)}: requests · hit</th>" for n in names)
    rows = []
    for m in minutes:
        when = "this minute" if m["age_min"] == 0 else f"{m['age_min']} min ago"
        bar = f"<span class=bar style=width:{4 * m['requests'] / peak:.2f}em></span>"
        cells = "".join(
            f"<td class=n>{b['requests']} · {_pct(b['hit_ratio'])}</td>"
            for b in m["backends"].values()
        )
        rows.append(
            f"<tr><td>{when}</td><td class=n>{bar}{m['requests']}</td>"
            f"<td class=n>{_pct(m['prefix_overlap'])}</td>{cells}</tr>"
        )
    return (
        "<h2>Last minutes</h2><table><tr><th>minute</th><th>requests</th>"
        f"<th>prefix overlap</th>{head}</tr>{''.join(rows)}</table>"
    )


class TrafficMetrics:
    """The window's gauges and the prediction counters, rendered after the gateway's."""

    def __init__(self) -> None:
        self.window_requests = Gauge(
            "kvroute:traffic_window_requests", "Requests in the traffic-shape window."
        )
        self.overlap = Gauge(
            "kvroute:traffic_prefix_overlap_ratio",
            "Share of the window's tokenized prompt tokens already in an earlier prompt of it.",
        )
        self.band = Gauge(
            "kvroute:traffic_overlap_band",
            "1 for the settled verdict band of the overlap (equivalent < 40 %, grey_zone, "
            "radix_pays > 60 %), else 0.",
            ("band",),
        )
        self.band_changes = MirroredCounter(
            "kvroute:traffic_band_changes_total", "Settled band crossings, by new band.", ("band",)
        )
        self.class_share = Gauge(
            "kvroute:traffic_class_share", "Share of the window's requests by class.", ("class",)
        )
        self.hit_ratio = Gauge(
            "kvroute:traffic_backend_hit_ratio",
            "Engine-reported cached ÷ prompt tokens over the window.",
            ("backend",),
        )
        self.predicted = MirroredCounter(
            "kvroute:cache_predicted_tokens_total",
            "Cached tokens the cache view predicted (cache_aware requests the engine reported on).",
            ("backend",),
        )
        self.reported = MirroredCounter(
            "kvroute:cache_reported_tokens_total",
            "Cached tokens the engine reported for the same requests.",
            ("backend",),
        )
        self.abs_error = Gauge(
            "kvroute:cache_prediction_abs_error_tokens",
            "Mean |predicted - reported| cached tokens per request over the window.",
            ("backend",),
        )
        self.error_ratio = Gauge(
            "kvroute:cache_prediction_error_ratio",
            "Σ|predicted - reported| ÷ Σ prompt tokens over the window.",
            ("backend",),
        )

    def exposition(self, traffic: TrafficShape, now_s: float) -> bytes:
        def collect() -> None:
            traffic.refresh(now_s)
            for metric in (self.band, self.band_changes, self.class_share, self.hit_ratio):
                metric.values.clear()
            for metric in (self.abs_error, self.error_ratio, self.overlap):
                metric.values.clear()
            self.window_requests.set((), traffic.num_requests)
            if traffic.overlap is not None:
                self.overlap.set((), traffic.overlap)
            for level in VerdictLevel:
                self.band.set((level.value,), 1.0 if traffic.band is level else 0.0)
                self.band_changes.set((level.value,), traffic.num_changes.get(level, 0))
            for name, share in traffic.class_shares().items():
                self.class_share.set((name,), share)
            for name, t in traffic.backends.items():
                for gauge, value in (
                    (self.hit_ratio, t.hit_ratio),
                    (self.abs_error, t.mean_abs_error_tokens),
                    (self.error_ratio, t.abs_error_ratio),
                ):
                    if value is not None:
                        gauge.set((name,), value)
            for name, value in traffic.predicted_total.items():
                self.predicted.set((name,), value)
            for name, value in traffic.reported_total.items():
                self.reported.set((name,), value)

        metrics: list[Counter] = [
            self.window_requests,
            self.overlap,
            self.band,
            self.band_changes,
            self.class_share,
            self.hit_ratio,
            self.predicted,
            self.reported,
            self.abs_error,
            self.error_ratio,
        ]
        return render(metrics, [collect])
