"""The live traffic window: prefix overlap, shape, band changes, the status page."""

from kvroute.gateway.native import search_path

__path__ = search_path(__path__, "traffic")  # the compiled build first, when current (native.py)
