"""The gateway's configuration: every section's dataclass, the YAML reader, reload diffs."""
