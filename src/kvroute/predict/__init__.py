"""Latency prediction: per-engine batch formation and a calibrated step-time model.

Entry point: :func:`kvroute.predict.predict.predict`; results in
:mod:`kvroute.predict.result`. Nothing is imported here (the package is imported by
``kvroute.cli`` lazily).
"""
