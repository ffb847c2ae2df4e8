"""Traces: request records, readers and writers per format, tokens, chained block hashing."""
