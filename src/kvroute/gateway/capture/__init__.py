"""Capture: a keyed-hash kvroute trace of the traffic the gateway forwards."""

from kvroute.gateway.native import search_path

__path__ = search_path(__path__, "capture")  # the compiled build first, when current (native.py)
