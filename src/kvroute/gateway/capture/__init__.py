"""Capture: a keyed-hash kvroute trace of the traffic the gateway forwards."""
