"""Report rendering for every kvroute command: terminal summaries, JSON aside, HTML pages.

- :mod:`kvroute.report.fmt`: numbers, durations and sizes as text, for every output, and
  the spaces inside a value that no line may break at.
- :mod:`kvroute.report.console_fit`: terminal lines and tables that never break a value.
- :mod:`kvroute.report.page`: the HTML page model (pages, sections, blocks), its
  stylesheet and escaping, rendered to one self-contained file.
- :mod:`kvroute.report.charts`: inline SVG charts (axes, canvas, bar layout, line and bar
  charts, histograms) and the chart blocks for a distribution.
- One package per command (:mod:`~kvroute.report.analyze`, :mod:`~kvroute.report.simulate`,
  :mod:`~kvroute.report.bench`, :mod:`~kvroute.report.predict`,
  :mod:`~kvroute.report.advise`): its ``console`` summary and its HTML ``page``, with the
  pieces only that command shows.

Imports point one way: commands -> charts -> page -> fmt.
"""
