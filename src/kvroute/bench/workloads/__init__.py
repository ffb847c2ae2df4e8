"""Workload generators: one module per traffic shape, all registered in :mod:`.registry`."""
