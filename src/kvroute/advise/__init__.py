"""kvroute advise: an engine per workload class, its flags, a gateway config and alerts."""
