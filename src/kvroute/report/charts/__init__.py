"""Inline SVG charts for the report pages: axes and ticks, drawing primitives, bar
layout, line and bar charts, histograms, and the chart blocks for a distribution."""
