"""``kvroute simulate``: the command (``command``), its options, the trace and KV pool it
reads, ``--latency`` and ``--validate``, and its outputs."""
