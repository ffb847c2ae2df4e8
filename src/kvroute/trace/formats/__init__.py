"""Trace formats: one module per format, each a :class:`~kvroute.trace.formats.base.TraceFormat`."""
