"""Report blocks for a :class:`~kvroute.stats.Distribution`: a histogram or a CDF chart,
or a sentence saying there is no data. Shared by the analyze, simulate and bench reports."""

from __future__ import annotations

import itertools

from kvroute.report import fmt
from kvroute.report.charts.svg import Bars, Series, Shape, bar_chart, histogram, line_chart
from kvroute.report.page.html import Block, Chart, Paragraph
from kvroute.stats import Distribution


def histogram_block(
    d: Distribution,
    title: str,
    x_label: str,
    *,
    percent_x: bool = False,
    y_label: str = "share of requests",
) -> Block:
    """A histogram of ``d``, its bars the share of ``y_label``'s items (requests unless
    the distribution counts something else, such as pairs)."""
    if not d.count:
        return Paragraph(f"{title}: no data in this trace.")
    edges = d.hist_edges
    if percent_x:
        labels = [f"{100 * lo:.0f}–{100 * hi:.0f} %" for lo, hi in itertools.pairwise(edges)]
        return Chart(
            bar_chart(
                labels,
                [c / d.count for c in d.hist_counts],
                title=title,
                x_label=x_label,
                y_label=y_label,
                percent=True,
            )
        )
    return Chart(
        histogram(
            edges,
            [c / d.count for c in d.hist_counts],
            title=title,
            x_label=x_label,
            y_label=y_label,
            percent=True,
        )
    )


def shares_block(
    title: str, labels: list[str], shares: list[float], y_label: str, x_label: str = "class"
) -> Block:
    """Shares by category as a bar chart, or as a sentence when at most two categories
    hold anything (a whole chart for one or two numbers says less than the numbers)."""
    held = [(label, share) for label, share in zip(labels, shares, strict=True) if share > 0]
    if len(held) <= 2:
        if not held:
            return Paragraph(f"{title}: no data.")
        parts = " and ".join(f"{fmt.percent(share)} {label}" for label, share in held)
        return Paragraph(f"{title}: {parts} ({y_label}).")
    return Chart(
        bar_chart(
            labels,
            [Bars(y_label, shares)],
            title=title,
            x_label=x_label,
            y_label=y_label,
            percent=True,
        )
    )


def cdf_block(d: Distribution, title: str, x_label: str, name: str) -> Block:
    if not d.count:
        return Paragraph(f"{title}: no data.")
    return Chart(
        line_chart(
            [Series(name, d.cdf_x, d.cdf_y, shape=Shape.STEP)],
            title=title,
            x_label=x_label,
            y_label="share of requests ≤ x",
            percent_y=True,
            y_min=0,
            y_max=1,
        )
    )
