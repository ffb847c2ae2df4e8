"""``kvroute bench``: the group and its ``run`` command (``command``) and the tools around
a run (``tools``: compare, workloads, generate, report)."""
