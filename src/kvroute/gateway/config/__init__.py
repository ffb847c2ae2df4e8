"""The gateway's configuration: every section's dataclass, the YAML reader, reload diffs.

Features import their section from here; nothing here imports a feature (the one
exception: the routing policies' registry, to check a route's policy name).
"""
