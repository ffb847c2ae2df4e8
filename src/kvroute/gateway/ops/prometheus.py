"""A minimal Prometheus text-format registry: counters, gauges, histograms.

Why not prometheus_client: its per-observation locking and label lookup cost several
microseconds on the gateway's hot path; here a label set is a tuple key in a dict
and an observation is one bisect. Single-threaded (asyncio) by design.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Counter:
    kind = "counter"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...] = (), amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def render(self) -> list[str]:
        return [
            f"{self.name}{_labels(self.label_names, k)} {_num(v)}" for k, v in self.values.items()
        ]


class Gauge(Counter):
    kind = "gauge"

    def set(self, labels: tuple[str, ...], value: float) -> None:
        self.values[labels] = value


class MirroredCounter(Gauge):
    """A counter whose value is copied from elsewhere (an engine's own counter)."""

    kind = "counter"


class Histogram:
    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, label_names: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.bounds = tuple(sorted(buckets))
        # per label set: [count per bucket..., count in +Inf], sum
        self.values: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        found = self.values.get(labels)
        if found is None:
            found = self.values[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        found[0][bisect.bisect_left(self.bounds, value)] += 1
        found[1][0] += value

    def render(self) -> list[str]:
        lines: list[str] = []
        for key, (counts, total) in self.values.items():
            running = 0
            for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
                running += count
                le = f'le="{_num(bound)}"'
                lines.append(f"{self.name}_bucket{_labels(self.label_names, key, le)} {running}")
            lines.append(f"{self.name}_sum{_labels(self.label_names, key)} {_num(total[0])}")
            lines.append(f"{self.name}_count{_labels(self.label_names, key)} {running}")
        return lines


Metric = Counter | Gauge | Histogram


def render(metrics: Sequence[Metric], collectors: Sequence[Callable[[], None]] = ()) -> bytes:
    """The text exposition of ``metrics``, after running ``collectors`` (which set
    gauges from live state)."""
    for collect in collectors:
        collect()
    lines: list[str] = []
    for metric in metrics:
        lines.append(f"# HELP {metric.name} {metric.help}")
        lines.append(f"# TYPE {metric.name} {metric.kind}")
        lines.extend(metric.render())
    return ("\n".join(lines) + "\n").encode()
