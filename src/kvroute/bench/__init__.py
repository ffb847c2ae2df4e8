"""``kvroute bench``: workload-shaped load tests against real OpenAI-compatible endpoints.

Data flow: a registered workload generator makes :class:`~kvroute.bench.workloads.base.BenchRequest`
records (real token lengths from the target model's tokenizer); a schedule gives each an
intended send time (open loop) or a user (closed loop); the runner sends them with the
streaming client, records scheduled, sent, first-byte, first-token and end times, reads
each engine's own cache counters, and the metrics module turns the records into the
summary a result file carries.
"""
