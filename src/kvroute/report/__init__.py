"""Report rendering shared by every kvroute command.

- :mod:`kvroute.report.fmt`: number formatters (tokens, percentages, durations, bytes) for
  HTML and terminal output alike.
- :mod:`kvroute.report.svg`: inline SVG line charts, bar charts and histograms.
- :mod:`kvroute.report.html`: a page/section/block model rendered to one self-contained
  HTML file (embedded CSS, no network, no JavaScript), written atomically.

Supporting modules: ``axes`` (round ticks and domains), ``canvas`` and ``bar_layout``
(SVG drawing), ``escape`` (text escaping).
"""
