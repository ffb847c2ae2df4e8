"""Routing policies: pure functions over backend snapshots (see base.py)."""
